package agenttool_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// renewFailsFor fails the lease renewals of one key while armed: the
// store's row for it is locked past the statement timeout, or the
// connection the renewal went out on drops, while the other keys' renewals
// go through.
type renewFailsFor struct {
	agenttool.Store
	mu  sync.Mutex
	key string
}

func (r *renewFailsFor) arm(key string) { r.mu.Lock(); r.key = key; r.mu.Unlock() }

func (r *renewFailsFor) Renew(ctx context.Context, req storekit.RenewRequest) error {
	r.mu.Lock()
	k := r.key
	r.mu.Unlock()
	if k != "" && req.Key == k {
		return errStoreDown
	}
	return r.Store.Renew(ctx, req)
}

// The reworded call goes on in place of the unknown email (found not
// applied), and the earlier email is held until the reworded call ends.
// The keeper of that hold cannot renew its lease; it cancels the hold's
// work context (which nothing in the reworded call watches) and the
// reworded call sends on. Once the held lease lapses, the identical
// resend took the earlier record over, found it not applied, met no
// fence (the reworded call's own record was pending, fresh, not marked) and
// no notice (the reworded call had not finished), and sent the original
// while the reworded email is being sent: two emails in one turn, the
// case TestReview11_RewordedInPlaceRunsConcurrentlyWithApprovedResend
// closed, reopened by one lost hold. The replacing call is now marked for
// the fence while it runs, so the resend finds it at work.
func TestReview12_HeldEarlierLosesItsLeaseWhileReplacingCallRuns(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		const lease = 300 * time.Millisecond
		g := newGatedMail(2) // run 2 is the reworded email: slow
		store := &renewFailsFor{Store: open()}
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: ans,
			Lease: lease, Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 50 * time.Millisecond})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		ans.set(reconcile.NotAppliedFenced())
		store.arm(first.RequestRef) // the held earlier record's renewals fail

		var reworded envelope.Envelope
		done := make(chan struct{})
		go func() {
			defer close(done)
			reworded = tool.Invoke(scoped(), review11Reworded)
		}()
		select {
		case <-g.started:
		case <-time.After(5 * time.Second):
			t.Fatal("the reworded email never started")
		}
		// While the reworded email is being sent, the resend waits and is
		// answered in_progress...
		early := tool.Invoke(scoped(), lunch)
		t.Logf("resend while held:        %s", early)
		// ...until the hold's lease lapses.
		time.Sleep(lease + 50*time.Millisecond)
		resend := tool.Invoke(scoped(), lunch)
		t.Logf("resend after lease lapse: %s", resend)
		close(g.gate)
		<-done
		t.Logf("reworded:                 %s", reworded)
		if n := g.count(); n != 1 {
			t.Errorf("one logical action (email Ana about lunch) in one turn left %d emails (%v)", n, g.effects)
		}
	})
}
