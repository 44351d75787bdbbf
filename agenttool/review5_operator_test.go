package agenttool_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// An operator decides "not applied" about the outcome she saw (attempt 1:
// nothing in the provider's log). Meanwhile the model's repeat takes the
// record over, the destination says not applied, and the call runs
// attempt 2, which delivers and loses its reply. Operator.hold now waits
// for the busy record instead of answering ErrBusy, and then applies her
// stale "not applied" to attempt 2's unknown outcome: the next call sends
// the email a second time. An Approver's decision was bound to the
// attempt count it saw, the operator's was not; now ResolveNotApplied
// names the attempts it is about, and a stale finding is refused
// (ErrStale).
func TestReview5_OperatorWaitAppliesAStaleVerdictToANewerOutcome(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		inside, release := make(chan struct{}), make(chan struct{})
		m := &mailServer{script: func(n int) (bool, error) {
			switch n {
			case 1:
				return false, errLostReply // did not go out; the client cannot tell
			case 2:
				close(inside)
				<-release
				return true, errLostReply // went out; reply lost
			}
			return true, nil
		}}
		check := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 5 * time.Second})
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		seen, _ := op.Show(context.Background(), first.RequestRef)
		t.Logf("operator sees %s: %v, %d attempt(s)", seen.Key, seen.State, seen.Attempts)

		// The model repeats the call; the mailbox now proves attempt 1 absent.
		check.set(reconcile.NotAppliedFenced())
		second := make(chan envelope.Envelope, 1)
		go func() { second <- tool.Invoke(scoped(), lunch) }()
		<-inside
		check.set(reconcile.StillPending()) // attempt 2's message is not indexed yet

		// Maria, having looked at attempt 1, resolves it as not applied.
		var opErr atomic.Value
		opDone := make(chan struct{})
		go func() {
			defer close(opDone)
			if err := op.ResolveNotApplied(context.Background(), first.RequestRef, seen.Attempts, "maria", "nothing in the provider's log"); err != nil {
				opErr.Store(err)
			}
		}()
		time.Sleep(50 * time.Millisecond) // her call is waiting for the busy record
		close(release)
		env2 := <-second
		<-opDone
		t.Logf("second call: %s", env2)
		t.Logf("operator: %v", opErr.Load())
		if err, _ := opErr.Load().(error); !errors.Is(err, agenttool.ErrStale) {
			t.Errorf("the operator's finding about attempt 1, applied to attempt 2: %v, want ErrStale", err)
		}

		third := tool.Invoke(scoped(), lunch)
		t.Logf("third call: %s", third)
		if m.count() > 1 {
			t.Fatalf("one logical action, %d emails: the operator's verdict on attempt 1 (seen %d attempt(s)) was applied "+
				"after she waited for a call that ran attempt 2", m.count(), seen.Attempts)
		}
	})
}
