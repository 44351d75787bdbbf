package agenttool_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// listFails is a store whose ListUnknown fails while fail is set (the
// store's index query times out mid-call).
type listFails struct {
	agenttool.Store
	fail atomic.Bool
}

func (l *listFails) ListUnknown(ctx context.Context, r storekit.ListRequest) ([]agenttool.Record, error) {
	if l.fail.Load() {
		return nil, errors.New("index query timed out")
	}
	return l.Store.ListUnknown(ctx, r)
}

// A keyed retry of an unknown action (a takeover: maybeRan) whose claim is
// fenced by another unknown action of the session, when the fence cannot
// read the store: storeUnavailable has no Earlier, and hold() dereferences
// env.Earlier to rewrite the note: the call panics instead of answering.
func TestAHeldBackRetryAnswersWhenTheStoreFails(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		c := newClock()
		inner := open()
		s := &listFails{Store: inner}
		m := &mailServer{dedupe: true, script: func(n int) (bool, error) { return true, errLostReply }}
		tool := newEmailTool(t, m, agenttool.Options{Store: s, Class: agenttool.Keyed, Now: c.Now,
			Reconciler: &answers{answer: reconcile.StillPending()}, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		a := tool.Invoke(scoped(), lunch)
		mustStatus(t, a, envelope.UnknownOutcome)
		// Another action of the session is held by a process that dies.
		holderOf(t, inner, recordOfRef(t, lunchReworded), c.Now(), lunchReworded)
		c.Advance(2 * time.Minute)

		s.fail.Store(true)
		var env envelope.Envelope
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Invoke panicked: %v", r)
				}
			}()
			env = tool.Invoke(scoped(), lunch) // the model follows "calling again later is safe"
		}()
		t.Logf("keyed retry while the store's index fails: %s", env)
		mustStatus(t, env, envelope.UnknownOutcome)
	})
}
