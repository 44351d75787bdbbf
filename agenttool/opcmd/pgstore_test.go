package opcmd_test

import (
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// The commands on PostgreSQL, where sweepers take records in batches: the
// unknown email is listed with its label, a stale finding refuses, the
// right one lets the next call run once, and a sweep settles the others.
func TestOnPostgreSQL(t *testing.T) {
	f := newFixture(t, pgtest.Open(t))
	ana := f.lostEmail("tenant-1/ana", "Ana Lima (ticket 4512)", "ana@example.com", "before")
	applied, notApplied, pending := sweepFixture(t, f)

	row := f.run("list", "-principal", "tenant-1/ana").ok(t).row(t, ana.RequestRef)
	if row[1] != "send_email" || row[2] != "unknown" || row[3] != "1" || row[5] != "Ana Lima (ticket 4512)" {
		t.Errorf("the row of Ana's email: %q", row)
	}
	if objs := f.run("-json", "list").ok(t).lines(t); len(objs) != 5 {
		t.Errorf("list -json: %d records, want 5", len(objs))
	}
	if o := f.run("show", ana.RequestRef, "-json").ok(t).lines(t)[0]; o["label"] != "Ana Lima (ticket 4512)" || o["outcome"] == nil {
		t.Errorf("show -json: %v", o)
	}

	f.run("resolve", "not-applied", ana.RequestRef, "-attempts", "2", "-by", "maria", "-why", "not in the log").exits(t, opcmd.ExitStale)
	if env := f.sendEmail("tenant-1/ana", "", "ana@example.com"); env.Status != envelope.UnknownOutcome || f.mail.count(ana.RequestRef) != 0 {
		t.Fatalf("after a stale finding, a call: %s", env)
	}
	attempts := f.record(ana.RequestRef).Attempts
	f.run("resolve", "not-applied", ana.RequestRef, "-attempts", itoa(attempts), "-by", "maria", "-why", "not in the log").ok(t)
	if env := f.sendEmail("tenant-1/ana", "", "ana@example.com"); env.Status != envelope.Success || f.mail.count(ana.RequestRef) != 1 {
		t.Fatalf("the next call: %s; %d sent", env, f.mail.count(ana.RequestRef))
	}

	out := f.run("sweep", "-once").ok(t)
	if !strings.Contains(out.stdout, "0        3        1        1            1              0        0       0") ||
		!strings.Contains(out.stderr, "sweeping: checked") {
		t.Errorf("sweep -once:\n%s\n%s", out.stdout, out.stderr)
	}
	for ref, state := range map[string]string{applied.RequestRef: "succeeded", notApplied.RequestRef: "unknown (retry approved)", pending.RequestRef: "unknown"} {
		if show := f.run("show", ref).ok(t).stdout; !strings.Contains(show, "state       "+state+"\n") {
			t.Errorf("after the sweep, %s:\n%s", ref, show)
		}
	}
	stats := f.run("stats").ok(t).stdout
	for _, want := range []string{"refund_payment  unknown                   1", "send_email      succeeded                 2",
		"send_email      unknown                   1", "send_email      unknown (retry approved)  1"} {
		if !strings.Contains(stats, want+"\n") {
			t.Errorf("stats does not print %q:\n%s", want, stats)
		}
	}
	f.run("show", "send_email/nosuchreference").exits(t, opcmd.ExitNotFound)
}
