package opcmd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/envelope"
)

// list shows the actions awaiting reconciliation — not the settled ones —
// with whose they are (the label), their attempts, age and last error, in
// a table and as JSON lines; -tool and -principal narrow it.
func TestListShowsWhatAwaitsReconciliation(t *testing.T) {
	f := boltFixture(t)
	ana := f.lostEmail("tenant-1/ana", "Ana Lima (ticket 4512)", "ana@example.com", "after")
	ben := f.lostEmail("tenant-2/ben", "Ben Okafor", "ben@example.com", "before")
	refund := f.lostRefund("tenant-1/ana", "Ana Lima (ticket 4512)", "A-1001", "after")
	if env := f.sendEmail("tenant-1/ana", "Ana Lima", "cara@example.com"); env.Status != envelope.Success {
		t.Fatalf("a plain email: %s", env)
	}
	updated := f.record(ana.RequestRef).Updated
	f.now = func() time.Time { return updated.Add(2*time.Hour + 30*time.Second) }

	out := f.run("list").ok(t)
	if !strings.HasPrefix(out.stdout, "REFERENCE") || strings.Count(strings.TrimSpace(out.stdout), "\n") != 3 {
		t.Errorf("want a header and three rows:\n%s", out.stdout)
	}
	row := out.row(t, ana.RequestRef)
	want := []string{ana.RequestRef, "send_email", "unknown", "1", "2h00m", "Ana Lima (ticket 4512)"}
	if len(row) != 7 || fmt.Sprint(row[:6]) != fmt.Sprint(want) || !strings.Contains(row[6], "connection reset by peer") {
		t.Errorf("the row of Ana's email: %q, want %q and the last error", row, want)
	}
	if row := out.row(t, refund.RequestRef); row[1] != "refund_payment" || row[5] != "Ana Lima (ticket 4512)" {
		t.Errorf("the row of the refund: %q", row)
	}
	out.row(t, ben.RequestRef)

	objs := f.run("list", "-json").ok(t).lines(t)
	if len(objs) != 3 {
		t.Fatalf("list -json: %d lines, want 3", len(objs))
	}
	for _, o := range objs {
		if o["ref"] == ana.RequestRef {
			if o["tool"] != "send_email" || o["state"] != "unknown" || o["attempts"] != 1.0 || o["label"] != "Ana Lima (ticket 4512)" ||
				!strings.Contains(fmt.Sprint(o["error"]), "connection reset") || o["updated"] == nil {
				t.Errorf("Ana's email as JSON: %v", o)
			}
		}
	}

	// Whose action a record is, found by its label, in any case.
	anas := f.run("-json", "list", "-label", "ticket 4512").ok(t).lines(t)
	if len(anas) != 2 || anas[0]["label"] != "Ana Lima (ticket 4512)" || anas[1]["label"] != "Ana Lima (ticket 4512)" {
		t.Errorf("list -label 'ticket 4512': %v; want Ana's two actions", anas)
	}
	if bens := f.run("-json", "list", "-label", "OKAFOR", "-limit", "1").ok(t).lines(t); len(bens) != 1 || bens[0]["ref"] != ben.RequestRef {
		t.Errorf("list -label OKAFOR -limit 1: %v; want Ben's", bens)
	}

	emails := f.run("-json", "list", "-tool", "send_email").ok(t).lines(t)
	if len(emails) != 2 || emails[0]["tool"] != "send_email" || emails[1]["tool"] != "send_email" {
		t.Errorf("list -tool send_email: %v", emails)
	}
	bens := f.run("list", "-principal", "tenant-2/ben", "-json").ok(t).lines(t)
	if len(bens) != 1 || bens[0]["ref"] != ben.RequestRef || bens[0]["label"] != "Ben Okafor" {
		t.Errorf("list -principal tenant-2/ben: %v", bens)
	}
	none := f.run("list", "-principal", "tenant-3/nobody").ok(t)
	if !strings.Contains(none.stdout, "No records await reconciliation") {
		t.Errorf("an empty list: %q", none.stdout)
	}
	if got := f.run("list", "-principal", "tenant-3/nobody", "-json").ok(t).stdout; got != "" {
		t.Errorf("an empty list as JSON: %q, want nothing", got)
	}
}

// -limit pages the list, and says how to get the next page; -after gets it.
func TestListPages(t *testing.T) {
	f := boltFixture(t)
	for _, to := range []string{"a@example.com", "b@example.com", "c@example.com"} {
		f.lostEmail("tenant-1", "", to, "before")
	}
	var seen []string
	after := ""
	for page := 0; page < 3; page++ {
		args := []string{"-json", "list", "-limit", "2"}
		if after != "" {
			args = append(args, "-after", after)
		}
		out := f.run(args...).ok(t)
		objs := out.lines(t)
		for _, o := range objs {
			seen = append(seen, o["ref"].(string))
		}
		if len(objs) < 2 {
			if strings.Contains(out.stderr, "There may be more") {
				t.Errorf("the last page says there may be more: %s", out.stderr)
			}
			break
		}
		after = seen[len(seen)-1]
		if !strings.Contains(out.stderr, "myapp retrysafe list -after "+after) {
			t.Errorf("a full page does not say how to get the next: %q", out.stderr)
		}
	}
	if len(seen) != 3 || seen[0] >= seen[1] || seen[1] >= seen[2] {
		t.Errorf("pages gave %v, want the three references in order", seen)
	}
	f.run("list", "-limit", "0").exits(t, opcmd.ExitUsage, "-limit")
	f.run("list", "extra").exits(t, opcmd.ExitUsage, `unexpected argument "extra"`)
}

// show prints one record in full, its resolution once it has one, and its
// outcome envelope; a reference that is not there exits 3.
func TestShow(t *testing.T) {
	f := boltFixture(t)
	ana := f.lostEmail("tenant-1/ana", "Ana Lima (ticket 4512)", "ana@example.com", "before")

	out := f.run("show", ana.RequestRef).ok(t)
	for _, want := range []string{
		"reference   " + ana.RequestRef, "as a UUID   " + agenttool.RefUUID(ana.RequestRef), "tool        send_email", "state       unknown", "attempts    1",
		"label       Ana Lima (ticket 4512)", "created     ", "updated     ", "resolution  none",
		`"status": "unknown_outcome"`, `"code": "outcome_unknown"`, "connection reset by peer",
	} {
		if !strings.Contains(out.stdout, want) {
			t.Errorf("show does not print %q:\n%s", want, out.stdout)
		}
	}

	f.run("resolve", "not-applied", ana.RequestRef, "-attempts", "1", "-by", "maria", "-why", "not in the mail log").ok(t)
	o := f.run("show", ana.RequestRef, "-json").ok(t).lines(t)[0]
	res, _ := o["resolution"].(map[string]any)
	if o["ref"] != ana.RequestRef || o["uuid"] != agenttool.RefUUID(ana.RequestRef) || o["retry_approved"] != true || res["verdict"] != "not applied" || res["by"] != "operator:maria" ||
		res["why"] != "not in the mail log" || res["at"] == nil {
		t.Errorf("show -json after a resolution: %v", o)
	}
	if env, _ := o["outcome"].(map[string]any); env["status"] != "unknown_outcome" || env["request_ref"] != ana.RequestRef {
		t.Errorf("show -json's outcome: %v", o["outcome"])
	}
	table := f.run("show", ana.RequestRef).ok(t).stdout
	if !strings.Contains(table, "state       unknown (retry approved)") || !strings.Contains(table, "resolution  not applied, by operator:maria, at ") ||
		!strings.Contains(table, "why         not in the mail log") {
		t.Errorf("show after a resolution:\n%s", table)
	}

	sent := f.sendEmail("tenant-1/ana", "", "ben@example.com")
	if show := f.run("show", sent.RequestRef).ok(t).stdout; !strings.Contains(show, "state       succeeded\n") ||
		!strings.Contains(show, `"message_id": "<`+sent.RequestRef+`@mail.test>"`) || !strings.Contains(show, "expires     ") {
		t.Errorf("show of a sent email:\n%s", show)
	}

	f.run("show", "send_email/nosuchreference").exits(t, opcmd.ExitNotFound, "not found", "Check the reference")
	f.run("-json", "show", "send_email/nosuchreference").exits(t, opcmd.ExitNotFound)
	f.run("show").exits(t, opcmd.ExitUsage, "name the record")
	f.run("show", "a", "b").exits(t, opcmd.ExitUsage, "one reference at a time")
}

// stats counts records by tool and state, with the unknown ones approved
// for a retry apart.
func TestStats(t *testing.T) {
	f := boltFixture(t)
	a := f.lostEmail("tenant-1", "", "a@example.com", "before")
	f.lostEmail("tenant-1", "", "b@example.com", "before")
	f.lostRefund("tenant-2", "", "A-1", "after")
	f.sendEmail("tenant-1", "", "c@example.com")
	f.run("resolve", "not-applied", a.RequestRef, "-attempts", "1", "-by", "maria", "-why", "bounced").ok(t)

	out := f.run("stats").ok(t).stdout
	for _, want := range []string{
		"TOOL            STATE                     RECORDS",
		"refund_payment  unknown                   1",
		"send_email      succeeded                 1",
		"send_email      unknown                   1",
		"send_email      unknown (retry approved)  1",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("stats does not print %q:\n%s", want, out)
		}
	}
	lines := f.run("stats", "-json", "-tool", "send_email").ok(t).lines(t)
	got := map[string]float64{}
	for _, l := range lines {
		got[fmt.Sprint(l["tool"], " ", l["state"], " ", l["retry_approved"] == true)] = l["records"].(float64)
	}
	want := map[string]float64{"send_email succeeded false": 1, "send_email unknown false": 1, "send_email unknown true": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stats -json -tool send_email: %v, want %v", got, want)
	}
	if lines := f.run("stats", "-json", "-principal", "tenant-2").ok(t).lines(t); len(lines) != 1 || lines[0]["tool"] != "refund_payment" {
		t.Errorf("stats -principal tenant-2: %v", lines)
	}
	if out := f.run("stats", "-principal", "nobody").ok(t).stdout; out != "No records.\n" {
		t.Errorf("stats of nobody: %q", out)
	}
}

// What a destination, a model or a person wrote is shown by the commands,
// never obeyed by the operator's terminal: control characters (C0 and C1:
// ESC, CSI, OSC, a carriage return) and bidi overrides in an error text, a
// label or a resolver's name are printed as escapes — in list and show, in
// tables and as JSON (whose escapes decode to the same text), and in error
// messages.
func TestOutputShowsControlCharactersInsteadOfObeyingThem(t *testing.T) {
	f := boltFixture(t)
	evil := "\x1b[2J\u009b31m\u009d0;owned\u009c\r\u202egnp.exe\u2066"
	f.mail.set(func(d *destination) { d.lostWith = errors.New("mailbox says: " + evil) })
	ana := f.lostEmail("tenant-1/ana", "Ana \u202eLima", "ana@example.com", "after")
	if err := f.op.ResolveNotApplied(context.Background(), ana.RequestRef, 1, "sam\u009b2J", "not in the log\u009d0;t\u009c"); err != nil {
		t.Fatal(err)
	}
	f.mail.set(func(d *destination) { d.lose = "after" })
	if env := f.sendEmail("tenant-1/ana", "", "ana@example.com"); env.Status != envelope.UnknownOutcome {
		t.Fatalf("the approved retry: %s", env)
	}

	outputs := map[string]result{
		"list":       f.run("list").ok(t),
		"show":       f.run("show", ana.RequestRef).ok(t),
		"list -json": f.run("-json", "list").ok(t),
		"show -json": f.run("-json", "show", ana.RequestRef).ok(t),
		"an error":   f.run("show", "send_email/\u009b2Jnothing").exits(t, opcmd.ExitNotFound),
	}
	for name, out := range outputs {
		for _, s := range []string{out.stdout, out.stderr} {
			if i, r := hiddenRune(s); i >= 0 {
				t.Errorf("%s prints %U at byte %d:\n%q", name, r, i, s)
			}
		}
	}
	show := outputs["show"].stdout
	for _, want := range []string{`\u001b[2J\u009b31m\u009d0;owned\u009c\r\u202egnp.exe`, `by operator:sam\u009b2J`, `Ana \u202eLima`, `not in the log\u009d0;t\u009c`} {
		if !strings.Contains(show, want) {
			t.Errorf("show does not print %q visibly:\n%s", want, show)
		}
	}
	if row := outputs["list"].row(t, ana.RequestRef); !strings.Contains(row[len(row)-1], `\u009b31m`) {
		t.Errorf("list's last error: %q", row)
	}
	o := outputs["show -json"].lines(t)[0]
	if !strings.Contains(fmt.Sprint(o["error"]), "mailbox says: "+evil) || o["label"] != "Ana \u202eLima" {
		t.Errorf("show -json does not decode to the recorded text: error %q, label %q", o["error"], o["label"])
	}
}

// hiddenRune returns the first character of s that a terminal obeys rather
// than shows (C0 but tab and newline, DEL, C1, bidi formatting, line and
// paragraph separators, bytes that are not UTF-8), and its index; -1 if
// there is none.
func hiddenRune(s string) (int, rune) {
	for i, r := range s {
		switch {
		case r == '\t' || r == '\n':
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == utf8.RuneError,
			r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
			return i, r
		}
	}
	return -1, 0
}
