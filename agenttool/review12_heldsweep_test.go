package agenttool_test

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// Control for TestReview12_HeldEarlierLosesItsLeaseWhileReplacingCallRuns:
// with the held record's keeper renewing, a reworded call that runs for
// several leases keeps the earlier email held against the sweeper and the
// resend, and exactly one email goes out (this holds up).
func TestReview12_HeldEarlierSurvivesLongReplacingCallAndSweeper(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		const lease = 150 * time.Millisecond
		g := newGatedMail(2)
		store := open()
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: ans,
			Lease: lease, Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 30 * time.Millisecond})
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		ans.set(reconcile.NotAppliedFenced())
		var reworded envelope.Envelope
		done := make(chan struct{})
		go func() { defer close(done); reworded = tool.Invoke(scoped(), review11Reworded) }()
		<-g.started
		for i := 0; i < 4; i++ {
			time.Sleep(lease)
			rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
			e := tool.Invoke(scoped(), lunch)
			t.Logf("round %d: sweep %+v %v; resend %s %s", i, rep, err, e.Status, e.Error.Code)
		}
		close(g.gate)
		<-done
		again := tool.Invoke(scoped(), lunch)
		t.Logf("after: %s", again)
		if n := g.count(); n != 1 {
			t.Errorf("%d emails (%v)", n, g.effects)
		}
		if again.Error == nil || again.Error.Code != envelope.CodeEarlierApplied {
			t.Errorf("resend after: %s", again)
		}
		_ = reworded
	})
}
