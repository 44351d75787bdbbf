package opcmd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// sweepFixture leaves three unknown emails — one the mail server has, one
// it never got, one it cannot tell yet — and an unknown refund, whose tool
// has no reconciler.
func sweepFixture(t *testing.T, f *fixture) (applied, notApplied, pending envelope.Envelope) {
	applied = f.lostEmail("tenant-1", "", "a@example.com", "after")
	notApplied = f.lostEmail("tenant-1", "", "b@example.com", "before")
	pending = f.lostEmail("tenant-1", "", "c@example.com", "after")
	f.lostRefund("tenant-1", "", "A-1", "after")
	f.mail.set(func(d *destination) {
		d.verdicts[applied.RequestRef] = reconcile.AppliedWith(json.RawMessage(`{"message_id":"<a@mail.test>"}`))
		d.verdicts[notApplied.RequestRef] = reconcile.NotAppliedFenced()
	})
	return applied, notApplied, pending
}

// sweep -once reconciles what awaits reconciliation, prints a progress
// line per batch on stderr and then its report; what it settled is what
// calls then find.
func TestSweepOnce(t *testing.T) {
	f := boltFixture(t)
	applied, notApplied, pending := sweepFixture(t, f)

	out := f.run("sweep", "-once", "-batch", "1").ok(t)
	wantReport := "EXPIRED  CHECKED  APPLIED  NOT APPLIED  STILL UNKNOWN  SKIPPED  ERRORS  UNREADABLE\n" +
		"0        3        1        1            1              1        0       0\n"
	if out.stdout != wantReport {
		t.Errorf("sweep -once printed:\n%s\nwant:\n%s", out.stdout, wantReport)
	}
	if n := strings.Count(out.stderr, "sweeping: checked"); n < 4 {
		t.Errorf("sweep -once -batch 1 over 4 records printed %d progress lines, want one per batch:\n%s", n, out.stderr)
	}

	left := f.run("-json", "list").ok(t).lines(t)
	if len(left) != 2 || (left[0]["ref"] != pending.RequestRef && left[1]["ref"] != pending.RequestRef) {
		t.Errorf("after the sweep, list: %v; want the pending email and the refund", left)
	}
	if env := f.sendEmail("tenant-1", "", "a@example.com"); !env.Replayed || f.mail.count(applied.RequestRef) != 1 {
		t.Errorf("the email the sweep found applied: %s", env)
	}
	if env := f.sendEmail("tenant-1", "", "b@example.com"); env.Status != envelope.Success || f.mail.count(notApplied.RequestRef) != 1 {
		t.Errorf("the email the sweep found not applied, sent again: %s; %d sent", env, f.mail.count(notApplied.RequestRef))
	}

	again := f.run("sweep", "-once", "-json").ok(t)
	rep := again.lines(t)
	if len(rep) != 1 || rep[0]["checked"] != 1.0 || rep[0]["unknown"] != 1.0 || rep[0]["skipped"] != 1.0 || rep[0]["progress"] != nil {
		t.Errorf("sweep -once -json: %v", rep)
	}
	var progress map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(again.stderr, "\n", 2)[0]), &progress); err != nil || progress["progress"] != true {
		t.Errorf("sweep -once -json's progress line: %q, %v", again.stderr, err)
	}
	f.run("sweep", "-once", "-batch", "0").exits(t, opcmd.ExitUsage, "-batch")
}

// sweep without -once passes every -interval until the context ends, and
// then exits 0.
func TestSweepRunsUntilTheContextEnds(t *testing.T) {
	f := boltFixture(t)
	applied, _, _ := sweepFixture(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, not a timing
	defer cancel()
	stderr, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		var out strings.Builder
		done <- opcmd.Run(ctx, f.op, []string{"sweep", "-interval", "10ms"}, &out, w, nil)
		w.Close()
	}()
	var lines []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		// After the pass that settles the applied email (a pass leaves alone
		// records that changed within -interval): its log line.
		if strings.Contains(sc.Text(), `msg="retrysafe: sweep"`) && strings.Contains(sc.Text(), "applied=1") && ctx.Err() == nil {
			cancel()
		}
	}
	if code := <-done; code != opcmd.ExitOK {
		t.Errorf("sweep until cancelled: exit %d\n%s", code, strings.Join(lines, "\n"))
	}
	all := strings.Join(lines, "\n")
	if !strings.HasPrefix(all, "Sweeping every 10ms until interrupted.") || !strings.Contains(all, "sweeping: checked") ||
		!strings.HasSuffix(all, "Stopped.") {
		t.Errorf("sweep's stderr:\n%s", all)
	}
	if rec := f.record(applied.RequestRef); rec.State != agenttool.Succeeded {
		t.Errorf("the sweeper left the applied email %v", rec.State)
	}
}
