package agenttool_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// failApproveStore fails the Finish that approves key for one more attempt
// while fail is set; with ambiguous, the store applies it and only the
// acknowledgement is lost.
type failApproveStore struct {
	agenttool.Store
	key             atomic.Value // string
	fail, ambiguous atomic.Bool
	fails           atomic.Int32
}

func (s *failApproveStore) Finish(ctx context.Context, r storekit.FinishRequest) error {
	if k, _ := s.key.Load().(string); r.RetryApproved && r.Key == k && s.fail.Load() {
		s.fails.Add(1)
		if s.ambiguous.Load() {
			s.Store.Finish(ctx, r)
		}
		return errStoreDown
	}
	return s.Store.Finish(ctx, r)
}

// A reworded call whose fence finds the unknown email not applied goes on
// in its place and settles it as not applied when it ends. When that write
// fails (a store error, or a commit whose acknowledgement is lost), the
// reworded call's success stands, and the email's own resend still sends
// nothing: it waits for the held record, or is told what was done instead.
func TestReview11_DeferredNotAppliedFails(t *testing.T) {
	for _, ambiguous := range []bool{false, true} {
		t.Run(map[bool]string{false: "refused", true: "ambiguous"}[ambiguous], func(t *testing.T) {
			m := firstLost()
			store := &failApproveStore{Store: memstore.New()}
			store.ambiguous.Store(ambiguous)
			check := &answers{answer: reconcile.StillPending()}
			tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check,
				Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 20 * time.Millisecond})
			first := tool.Invoke(scoped(), lunch)
			mustStatus(t, first, envelope.UnknownOutcome)
			check.set(reconcile.NotAppliedFenced())
			store.key.Store(first.RequestRef)
			store.fail.Store(true)
			mustStatus(t, tool.Invoke(scoped(), review11Reworded), envelope.Success)
			if store.fails.Load() == 0 {
				t.Fatal("the earlier action was never settled as not applied")
			}
			resend := tool.Invoke(scoped(), lunch)
			t.Logf("resend: %s", resend)
			if resend.Status == envelope.Success {
				t.Errorf("the earlier action's resend: %s; want it held", resend)
			}
			if n := m.count(); n != 1 {
				t.Errorf("%d emails, want 1", n)
			}
		})
	}
}
