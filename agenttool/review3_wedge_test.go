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

// The fence takes an earlier unknown action over to ask the destination;
// the reconciler panics once (a bug in a status client; the application
// recovers it, as net/http does for a handler). The call's own flight is
// ended by its defers, but the earlier action's takeover (holding) has no
// defer: its keeper renews the lease forever. The record stays pending,
// "being verified right now": neither an operator nor the fence can ever
// settle it, although the operator knows it was delivered.
func TestAPanickingCheckDoesNotHoldTheRecordForever(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply
			}
			return true, nil
		}}
		var armed, panicked atomic.Bool
		check := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
			if armed.Load() && panicked.CompareAndSwap(false, true) {
				var index map[string]*struct{ found bool }
				_ = index[ref].found // nil pointer dereference in the status client
			}
			return reconcile.StillPending()
		})
		lease := 90 * time.Millisecond
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check,
			Lease: lease, Retry: agenttool.RetryPolicy{MaxAttempts: 1, MaxElapsed: time.Second}})
		a := tool.Invoke(scoped(), lunch)
		mustStatus(t, a, envelope.UnknownOutcome)

		armed.Store(true)
		func() { // the application's handler recovers a panic, as net/http does
			defer func() { recover() }()
			tool.Invoke(scoped(), lunchReworded)
		}()
		if !panicked.Load() {
			t.Fatal("test setup: the check did not run")
		}
		time.Sleep(10 * lease) // long after any lease of the dead check would have lapsed

		op, _ := agenttool.NewOperator(store, tool)
		err := op.ResolveApplied(context.Background(), a.RequestRef, a.Attempts, []byte(`{"message_id":"<a@mail.test>"}`), "maria", "found in the provider's log")
		rec, _ := store.Get(context.Background(), a.RequestRef)
		t.Logf("operator: %v; record %v taken over %v, lease ends in %v", err, rec.State, rec.TakenOver, time.Until(rec.LeaseExpiry))
		if errors.Is(err, agenttool.ErrBusy) {
			t.Fatalf("%d leases after the check died, the record is still held (pending, renewed): the operator cannot settle it", 10)
		}
	})
}
