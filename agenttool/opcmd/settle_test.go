package opcmd_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// The request never reached the mail server. A person who checked its log
// resolves the email as not applied, bound to the attempts list showed: a
// stale finding refuses and changes nothing; the right one lets the next
// call run the tool once, and only once.
func TestResolveNotAppliedRunsTheNextCallOnce(t *testing.T) {
	f := boltFixture(t)
	ana := f.lostEmail("tenant-1/ana", "Ana Lima", "ana@example.com", "before")
	listed := f.run("-json", "list").ok(t).lines(t)
	if len(listed) != 1 || listed[0]["attempts"] != 1.0 {
		t.Fatalf("list: %v", listed)
	}
	before := f.record(ana.RequestRef)

	f.run("resolve", "not-applied", ana.RequestRef, "-by", "maria", "-why", "not in the log").
		exits(t, opcmd.ExitUsage, "-attempts is required")
	f.run("resolve", "not-applied", ana.RequestRef, "-attempts", "x", "-by", "maria", "-why", "w").
		exits(t, opcmd.ExitUsage, "-attempts", "whole number")
	f.run("resolve", "not-applied", ana.RequestRef, "-attempts", "1", "-why", "not in the log").
		exits(t, opcmd.ExitUsage, "-by is required")
	f.run("resolve", "not-applied", ana.RequestRef, "-attempts", "1", "-by", "maria").
		exits(t, opcmd.ExitUsage, "-why is required")
	f.run("resolve", "not-applied", ana.RequestRef, "-attempts", "2", "-by", "maria", "-why", "not in the log").
		exits(t, opcmd.ExitStale, "attempt 2", "at attempt 1", "Nothing was settled")
	f.run("-json", "resolve", "not-applied", ana.RequestRef, "-attempts", "0", "-by", "maria", "-why", "not in the log").
		exits(t, opcmd.ExitStale)
	after := f.record(ana.RequestRef)
	if after.State != agenttool.Unknown || after.RetryApproved || after.Resolution != nil || after.Attempts != before.Attempts {
		t.Fatalf("refused findings changed the record: %+v", after)
	}
	if env := f.sendEmail("tenant-1/ana", "Ana Lima", "ana@example.com"); env.Status != envelope.UnknownOutcome || f.mail.count(ana.RequestRef) != 0 {
		t.Fatalf("after the refused findings, a call: %s; %d emails (want still unknown, none sent)", env, f.mail.count(ana.RequestRef))
	}
	attempts := f.record(ana.RequestRef).Attempts

	out := f.run("resolve", "not-applied", ana.RequestRef, "-attempts", itoa(attempts), "-by", "maria", "-why", "not in the log").ok(t)
	if !strings.Contains(out.stdout, ana.RequestRef+": settled as not applied by maria") {
		t.Errorf("resolve not-applied says: %q", out.stdout)
	}
	f.run("resolve", "not-applied", ana.RequestRef, "-attempts", itoa(attempts), "-by", "maria", "-why", "twice").
		exits(t, opcmd.ExitNotUnknown, "not awaiting reconciliation")

	env := f.sendEmail("tenant-1/ana", "Ana Lima", "ana@example.com")
	if env.Status != envelope.Success || f.mail.count(ana.RequestRef) != 1 {
		t.Fatalf("the next call: %s; %d emails, want success and one", env, f.mail.count(ana.RequestRef))
	}
	if env := f.sendEmail("tenant-1/ana", "Ana Lima", "ana@example.com"); !env.Replayed || f.mail.count(ana.RequestRef) != 1 {
		t.Errorf("the call after: %s; %d emails, want a replay and still one", env, f.mail.count(ana.RequestRef))
	}
	f.run("resolve", "not-applied", ana.RequestRef, "-attempts", itoa(attempts+1), "-by", "maria", "-why", "late").
		exits(t, opcmd.ExitNotUnknown)
	f.run("resolve", "not-applied", "send_email/nosuchreference", "-attempts", "1", "-by", "maria", "-why", "w").
		exits(t, opcmd.ExitNotFound)
}

// The mail server has the message: resolve applied with its result, and
// calls replay that result without sending again.
func TestResolveApplied(t *testing.T) {
	f := boltFixture(t)
	ana := f.lostEmail("tenant-1/ana", "", "ana@example.com", "after")

	f.run("resolve", "applied", ana.RequestRef, "-attempts", "1", "-result", `{"message_id":`, "-by", "maria", "-why", "in the log").
		exits(t, opcmd.ExitUsage, "-result is not valid JSON")
	f.run("resolve", "applied", ana.RequestRef, "-attempts", "1", "-why", "in the log").exits(t, opcmd.ExitUsage, "-by is required")
	f.run("resolve", "applied", ana.RequestRef, "-by", "maria", "-why", "in the log").exits(t, opcmd.ExitUsage, "-attempts is required")
	f.run("resolve", "applied", ana.RequestRef, "-attempts", "2", "-by", "maria", "-why", "in the log").
		exits(t, opcmd.ExitStale, "about attempt 2, and the record is at attempt 1")
	f.run("resolve", "applied").exits(t, opcmd.ExitUsage, "name the record")
	f.run("resolve").exits(t, opcmd.ExitUsage, "resolve applied REF")
	f.run("resolve", "maybe", ana.RequestRef).exits(t, opcmd.ExitUsage, `no command "resolve maybe"`)
	if rec := f.record(ana.RequestRef); rec.State != agenttool.Unknown || rec.Resolution != nil {
		t.Fatalf("refused command lines changed the record: %+v", rec)
	}

	o := f.run("resolve", "applied", ana.RequestRef, "-json", "-attempts", "1", "-result", `{"message_id":"<m-1@mail.test>"}`, "-by", "maria", "-why", "in the log").
		ok(t).lines(t)[0]
	if o["ref"] != ana.RequestRef || o["verdict"] != "applied" || o["by"] != "maria" || o["attempts"] != 1.0 || o["settled"] != true {
		t.Errorf("resolve applied -json: %v", o)
	}
	env := f.sendEmail("tenant-1/ana", "", "ana@example.com")
	if env.Status != envelope.Success || !env.Replayed || string(env.Result) != `{"message_id":"<m-1@mail.test>"}` || f.mail.runCount() != 1 {
		t.Errorf("a call after resolve applied: %s; %d runs, want the result replayed and no new run", env, f.mail.runCount())
	}
	f.run("resolve", "applied", ana.RequestRef, "-attempts", "1", "-by", "maria", "-why", "again").exits(t, opcmd.ExitNotUnknown, "nothing to settle")
}

// approve decides on an at-most-once refund: -compensate runs the
// compensating action once, -retry-once allows exactly one more attempt.
func TestApprove(t *testing.T) {
	f := boltFixture(t)
	a := f.lostRefund("tenant-1", "order A-1", "A-1", "after")
	b := f.lostRefund("tenant-1", "order B-2", "B-2", "before")

	f.run("approve", a.RequestRef, "-by", "maria", "-why", "w").exits(t, opcmd.ExitUsage, "-retry-once or -compensate")
	f.run("approve", a.RequestRef, "-retry-once", "-compensate", "-attempts", "1", "-by", "maria", "-why", "w").
		exits(t, opcmd.ExitUsage, "-retry-once or -compensate")
	f.run("approve", a.RequestRef, "-retry-once", "-by", "maria", "-why", "w").exits(t, opcmd.ExitUsage, "-attempts is required")
	f.run("approve", a.RequestRef, "-compensate", "-attempts", "3", "-by", "maria", "-why", "customer cancelled").
		exits(t, opcmd.ExitStale, "at attempt 1")
	f.run("approve", a.RequestRef, "-compensate", "-by", "maria", "-why", "customer cancelled").exits(t, opcmd.ExitUsage, "-attempts is required")
	if len(f.pay.undoneRefs()) != 0 {
		t.Fatalf("a stale decision compensated: %v", f.pay.undoneRefs())
	}

	out := f.run("approve", a.RequestRef, "-compensate", "-attempts", "1", "-by", "maria", "-why", "customer cancelled").ok(t)
	if undone := f.pay.undoneRefs(); !strings.Contains(out.stdout, "settled as compensated by maria") || len(undone) != 1 || undone[0] != a.RequestRef {
		t.Fatalf("approve -compensate: %q; undone %v", out.stdout, undone)
	}
	if env := f.refundOrder("tenant-1", "", "A-1"); env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeCompensated || f.pay.runCount() != 2 {
		t.Errorf("a call after compensation: %s; %d runs", env, f.pay.runCount())
	}
	f.run("approve", a.RequestRef, "-compensate", "-attempts", "1", "-by", "maria", "-why", "twice").exits(t, opcmd.ExitNotUnknown)

	o := f.run("approve", b.RequestRef, "-retry-once", "-attempts", "1", "-by", "maria", "-why", "the bank has no such refund", "-json").ok(t).lines(t)[0]
	if o["verdict"] != "not applied" || o["attempts"] != 1.0 {
		t.Errorf("approve -retry-once -json: %v", o)
	}
	if env := f.refundOrder("tenant-1", "", "B-2"); env.Status != envelope.Success || f.pay.count(b.RequestRef) != 1 {
		t.Errorf("the approved retry: %s; applied %d times, want once", env, f.pay.count(b.RequestRef))
	}
	if env := f.refundOrder("tenant-1", "", "B-2"); !env.Replayed || f.pay.count(b.RequestRef) != 1 {
		t.Errorf("after the approved retry: %s; applied %d times", env, f.pay.count(b.RequestRef))
	}
}

// reconcile asks the destination and prints its answer: applied settles
// the record; pending leaves it unknown; a tool without a reconciler is a
// failed operation that says why.
func TestReconcile(t *testing.T) {
	f := boltFixture(t)
	ana := f.lostEmail("tenant-1", "", "ana@example.com", "after")
	refund := f.lostRefund("tenant-1", "", "A-1", "after")

	f.run("reconcile", ana.RequestRef).exits(t, opcmd.ExitUsage, "-by is required")
	out := f.run("reconcile", ana.RequestRef, "-by", "maria").ok(t)
	if !strings.Contains(out.stdout, "the destination answered pending: the record stays unknown") {
		t.Errorf("reconcile, pending: %q", out.stdout)
	}
	if rec := f.record(ana.RequestRef); rec.State != agenttool.Unknown || rec.RetryApproved {
		t.Errorf("a pending answer settled the record: %+v", rec)
	}

	f.mail.set(func(d *destination) {
		d.verdicts[ana.RequestRef] = reconcile.AppliedWith(json.RawMessage(`{"message_id":"<found@mail.test>"}`))
	})
	o := f.run("-json", "reconcile", ana.RequestRef, "-by", "maria").ok(t).lines(t)[0]
	if o["verdict"] != "applied" || o["settled"] != true {
		t.Errorf("reconcile -json, applied: %v", o)
	}
	if rec := f.record(ana.RequestRef); rec.State != agenttool.Succeeded || rec.Resolution.By != "operator:maria" {
		t.Errorf("after reconcile: %v by %+v", rec.State, rec.Resolution)
	}
	if env := f.sendEmail("tenant-1", "", "ana@example.com"); !env.Replayed || string(env.Result) != `{"message_id":"<found@mail.test>"}` || f.mail.count(ana.RequestRef) != 1 {
		t.Errorf("a call after reconcile: %s", env)
	}
	f.run("reconcile", ana.RequestRef, "-by", "maria").exits(t, opcmd.ExitNotUnknown)
	f.run("reconcile", refund.RequestRef, "-by", "maria").exits(t, opcmd.ExitFailed, `tool "refund_payment" has no reconciler`)
	if rec := f.record(refund.RequestRef); rec.State != agenttool.Unknown {
		t.Errorf("the failed reconcile left the refund %v", rec.State)
	}
}

// A record that a live call holds is busy: settling it exits 4 and changes
// nothing; once the call ends, the record is what the call made it.
func TestSettlingWhatALiveCallHoldsIsBusy(t *testing.T) {
	f := boltFixture(t)
	release := make(chan struct{})
	running := make(chan string, 1)
	f.mail.set(func(d *destination) { d.blockRuns, d.running = release, running })
	done := make(chan envelope.Envelope, 1)
	go func() { done <- f.sendEmail("tenant-1", "", "ana@example.com") }()
	ref := <-running

	f.run("resolve", "applied", ref, "-attempts", "0", "-by", "maria", "-why", "seen").exits(t, opcmd.ExitBusy, "held by a live call", "Try again")
	f.run("-json", "resolve", "not-applied", ref, "-attempts", "1", "-by", "maria", "-why", "w").exits(t, opcmd.ExitBusy)
	close(release)
	if env := <-done; env.Status != envelope.Success || f.mail.count(ref) != 1 {
		t.Errorf("the live call: %s", env)
	}
	if rec := f.record(ref); rec.State != agenttool.Succeeded || rec.Resolution != nil {
		t.Errorf("after the busy refusals: %v, %+v", rec.State, rec.Resolution)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// A finding of not applied, or a compensation, while the attempt may still
// land changes nothing: it exits 4, saying until when, as a busy record
// does; a finding of applied settles at once.
func TestSettlingWhileTheAttemptMayStillLandWaits(t *testing.T) {
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "app.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := newFixture(t, store, func(o *agenttool.Options) { o.AttemptTimeout = time.Hour })
	lost := f.lostEmail("tenant-1", "", "ana@example.com", "before")
	f.pay.set(func(d *destination) { d.lose = "after" })
	refund := f.refundOrder("tenant-1", "", "o-1")
	f.pay.set(func(d *destination) { d.lose = "" })
	if refund.Status != envelope.UnknownOutcome {
		t.Fatalf("a lost refund: %s", refund)
	}
	f.run("resolve", "not-applied", lost.RequestRef, "-attempts", "1", "-by", "maria", "-why", "not in the log").
		exits(t, opcmd.ExitBusy, "may still land until", "Decide after the time given")
	f.run("approve", refund.RequestRef, "-compensate", "-attempts", "1", "-by", "maria", "-why", "cancelled").
		exits(t, opcmd.ExitBusy, "may still land until")
	for _, ref := range []string{lost.RequestRef, refund.RequestRef} {
		if rec := f.record(ref); rec.State != agenttool.Unknown || rec.RetryApproved || rec.Resolution != nil {
			t.Errorf("a decision too early changed %s: %v approved %v, %+v", ref, rec.State, rec.RetryApproved, rec.Resolution)
		}
	}
	if undone := f.pay.undoneRefs(); len(undone) != 0 {
		t.Errorf("compensated %v while the refund may still land", undone)
	}
	f.run("resolve", "applied", lost.RequestRef, "-attempts", "1", "-by", "maria", "-why", "in the log").ok(t)
}

// A person deciding an action that went on in place of one found not
// applied is shown that one, and told when a late answer proved it
// applied after all: this action may be it reworded, and approving it
// may do it twice.
func TestShowSaysWhatAnActionWentOnInPlaceOf(t *testing.T) {
	f := boltFixture(t)
	ctx := context.Background()
	first := f.lostRefund("tenant-1/ana", "Ana Lima", "o-1", "after")
	f.run("resolve", "not-applied", first.RequestRef, "-attempts", "1", "-by", "maria", "-why", "not at the bank yet").ok(t)
	f.pay.set(func(d *destination) { d.lose = "before" })
	copy := f.refund.Invoke(ctxFor("tenant-1/ana", "conversation-o-1", ""), `{"order":"o-1","amount":"12.5"}`)
	f.pay.set(func(d *destination) { d.lose = "" })
	if copy.Status != envelope.UnknownOutcome {
		t.Fatalf("the reworded refund: %s; want unknown_outcome", copy)
	}
	out := f.run("show", copy.RequestRef).ok(t)
	if !strings.Contains(out.stdout, "in place of") || !strings.Contains(out.stdout, first.RequestRef+" (failed)") {
		t.Errorf("show of the action in another's place does not name it:\n%s", out.stdout)
	}
	if out := f.run("show", first.RequestRef).ok(t); !strings.Contains(out.stdout, "replaced by") || !strings.Contains(out.stdout, copy.RequestRef) {
		t.Errorf("show of the replaced action does not name what replaced it:\n%s", out.stdout)
	}
	v, err := f.op.SettleByAnswer(ctx, first.RequestRef, 1, reconcile.AppliedWith([]byte(`"refunded"`)), "late")
	if v != reconcile.Applied || !errors.Is(err, agenttool.ErrContradicted) {
		t.Fatalf("the late answer: %v, %v; want applied aside, for a person to look", v, err)
	}
	out = f.run("show", copy.RequestRef).ok(t)
	if !strings.Contains(out.stdout, first.RequestRef+", found applied after all") || !strings.Contains(out.stdout, "do not approve this one") {
		t.Errorf("show after the first was found applied does not warn:\n%s", out.stdout)
	}
	js := f.run("-json", "show", copy.RequestRef).ok(t).lines(t)
	if len(js) != 1 || js[0]["replaces"] != first.RequestRef || js[0]["replaces_state"] != "succeeded" || js[0]["stands_in_for_applied"] != true ||
		js[0]["stands_for"] != first.RequestRef {
		t.Errorf("show -json: %v; want replaces %s, replaces_state succeeded, stands_in_for_applied, stands_for the same", js, first.RequestRef)
	}
}

// A reworded copy that the notice of an action found done held back was
// never run: show says so, and names that action, where it would
// otherwise say that no outcome was recorded yet.
func TestShowSaysWhatHeldAnActionBack(t *testing.T) {
	f := boltFixture(t)
	first := f.lostRefund("tenant-1/ana", "Ana Lima", "o-1", "after")
	f.run("resolve", "applied", first.RequestRef, "-attempts", "1", "-result", `"refunded"`, "-by", "maria", "-why", "in the bank's log").ok(t)
	held := f.refund.Invoke(ctxFor("tenant-1/ana", "conversation-o-1", ""), `{"order":"o-1","amount":"12.5"}`)
	if held.Error == nil || held.Error.Code != envelope.CodeEarlierApplied {
		t.Fatalf("the reworded refund: %s; want earlier_action_applied", held)
	}
	out := f.run("show", held.RequestRef).ok(t)
	if !strings.Contains(out.stdout, "held back") || !strings.Contains(out.stdout, first.RequestRef+", whose outcome was unknown, was found done: this was not run") ||
		strings.Contains(out.stdout, "none recorded yet") {
		t.Errorf("show of the copy held back does not say what held it back:\n%s", out.stdout)
	}
	js := f.run("-json", "show", held.RequestRef).ok(t).lines(t)
	if len(js) != 1 || js[0]["held_back"] != true || js[0]["stands_for"] != first.RequestRef || js[0]["state"] != "failed" {
		t.Errorf("show -json: %v; want held_back, stands_for %s, failed", js, first.RequestRef)
	}
}
