package agenttool_test

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// A process claims an approved retry (DecideClaim marks it TakenOver) and
// dies before recording anything. Checks (these hold up): while its lease
// is live the record fences a reworded copy and is not listed by the
// operator; once lapsed, Operator.Unknown lists it with the dead attempt
// counted, the reworded copy is fenced, and the resend asks the destination
// (trust rule: pending until the lapsed lease + AttemptTimeout + ClockSkew)
// instead of retrying blindly.
func TestReview12_CrashMidApprovedRetry(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		c := newClock()
		store := open()
		m := firstLost()
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: ans, Now: c.Now,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 20 * time.Millisecond})
		op, _ := agenttool.NewOperator(store, tool)
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		if err := op.ResolveNotApplied(context.Background(), first.RequestRef, first.Attempts, "maria", "not in the log"); err != nil {
			t.Fatal(err)
		}
		rec, _ := store.Get(context.Background(), first.RequestRef)
		// The dying process claims the approved retry.
		res, err := store.Claim(context.Background(), storekit.ClaimRequest{Key: rec.Key, Tool: rec.Tool, Principal: rec.Principal,
			Session: rec.Session, Fingerprint: rec.Fingerprint, Owner: "dying", Now: c.Now(), Lease: time.Minute, TakeOver: true})
		if err != nil || !res.Claimed {
			t.Fatalf("claim: %+v %v", res, err)
		}
		live, _ := op.Unknown(context.Background(), "", 0)
		rw := tool.Invoke(scoped(), lunchReworded)
		t.Logf("live: operator lists %d; reworded %s", len(live), rw)
		if len(live) != 0 || rw.Error == nil || rw.Error.Code != envelope.CodeEarlierUnknown {
			t.Errorf("live approved retry: listed %d, reworded %s", len(live), rw)
		}
		c.Advance(time.Minute + 100*time.Millisecond) // lapsed, but the dead attempt may still land (ClockSkew 1s)
		lapsed, _ := op.Unknown(context.Background(), "", 0)
		ans.set(reconcile.NotAppliedYet())
		resend := tool.Invoke(scoped(), lunch)
		t.Logf("lapsed: operator lists %+v; resend %s", len(lapsed), resend)
		if len(lapsed) != 1 || lapsed[0].Attempts != 2 {
			t.Errorf("lapsed approved retry listed as %+v", lapsed)
		}
		if m.count() != 0 || resend.Status == envelope.Success {
			t.Errorf("resend after a crash mid approved retry ran blindly: %s (%d emails)", resend, m.count())
		}
		c.Advance(time.Minute)
		later := tool.Invoke(scoped(), lunch)
		t.Logf("later: %s", later)
		if m.count() != 1 {
			t.Errorf("%d emails", m.count())
		}
	})
}
