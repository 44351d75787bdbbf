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

// The mailbox's search API accepts the connection and never answers (no
// HTTP timeout in the status client). The check honours its context, but
// a sweeper's context lives as long as the sweeper: nothing bounds a check,
// and the holding's keeper renews the lease for as long as it waits. The
// record was "held by a live call" for ever: the operator, who found the
// email in the provider's log, could not settle it (ErrBusy), the unknown
// fence held the session, and the sweeper's pass never ended, so no other
// record was checked again. Now CheckTimeout bounds every check, the
// sweeper rests a record between checks, and the operator waits for a
// check in progress to end.
func TestReview4_AHangingCheckHoldsTheRecordForever(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) { hangingCheck(t, open()) })
}

func hangingCheck(t *testing.T, store agenttool.Store) {
	m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }} // every reply is lost
	var hang atomic.Bool
	var checks atomic.Int64
	check := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		checks.Add(1)
		if hang.Load() {
			<-ctx.Done() // the search API never answers; the check honours ctx
			return reconcile.CantSayBecause(ctx.Err())
		}
		return reconcile.StillPending()
	})
	lease := 60 * time.Millisecond
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check,
		Lease: lease, CheckTimeout: 2 * lease, Retry: agenttool.RetryPolicy{MaxAttempts: 1, MaxElapsed: time.Second}})
	a := tool.Invoke(scoped(), lunch)
	mustStatus(t, a, envelope.UnknownOutcome)

	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	hang.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	passes := make(chan error, 1)
	go func() { passes <- op.RunSweeper(ctx, agenttool.SweeperOptions{Interval: 10 * time.Millisecond}) }()
	time.Sleep(20 * lease)

	err = op.ResolveApplied(context.Background(), a.RequestRef, a.Attempts, []byte(`{"message_id":"<a@mail.test>"}`), "maria", "found in the provider's log")
	rec, _ := store.Get(context.Background(), a.RequestRef)
	if errors.Is(err, agenttool.ErrBusy) {
		t.Errorf("20 leases into a check that never answers, the operator cannot settle the record: %v (record %v, taken over %v, checks %d)",
			err, rec.State, rec.TakenOver, checks.Load())
	}
	// The session is fenced meanwhile.
	hang.Store(false)
	env := tool.Invoke(scoped(), lunchReworded)
	if env.Error != nil && env.Error.Code == envelope.CodeEarlierUnknown {
		t.Errorf("a new action is held back by the hanging check: %s", env)
	}
	// And the sweeper never starts another pass: a second unknown action is
	// never checked.
	other := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-1/user-1", "c-1"), lunch)
	mustStatus(t, other, envelope.UnknownOutcome)
	before := checks.Load()
	time.Sleep(20 * lease)
	if checks.Load() == before {
		t.Errorf("the sweeper checked nothing in 20 leases (its pass is stuck in the hanging check)")
	}
}

// A reconciler that ignores its context, or panics, cannot hold a call:
// after CheckTimeout the check counts as "can't say" and the outcome stays
// unknown; a panic is a "can't say" too, not a crash.
func TestReview4_AStubbornOrPanickingCheckIsCantSay(t *testing.T) {
	block := make(chan struct{})
	defer close(block) // lets the abandoned check end
	for name, check := range map[string]reconcile.Func{
		"ignores its context": func(ctx context.Context, ref string) reconcile.Answer {
			<-block
			return reconcile.AppliedWith(nil)
		},
		"panics": func(ctx context.Context, ref string) reconcile.Answer { panic("index out of range") },
	} {
		t.Run(name, func(t *testing.T) {
			m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
			tool := newEmailTool(t, m, agenttool.Options{Store: openBolt(t, t.TempDir()+"/keys.db"), Class: agenttool.Reconcilable,
				Reconciler: check, CheckTimeout: 50 * time.Millisecond, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
			done := make(chan envelope.Envelope, 1)
			go func() { done <- tool.Invoke(scoped(), lunch) }()
			select {
			case env := <-done:
				mustStatus(t, env, envelope.UnknownOutcome)
				if env.Next != envelope.DoNotRetry || m.count() != 1 {
					t.Errorf("envelope %s after %d emails", env, m.count())
				}
				t.Log(env.Error.Message)
			case <-time.After(30 * time.Second):
				t.Fatal("the call is still waiting for its check")
			}
		})
	}
}
