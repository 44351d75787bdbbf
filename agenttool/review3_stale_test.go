package agenttool_test

import (
	"context"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// Two calls of one at-most-once action meet its unknown outcome and ask the
// approver; the fast one's approved retry succeeds. The slow one's
// takeover then finds the record succeeded (ErrNotUnknown) and answers
// unknown_outcome, "ask a person to confirm", although the store holds a
// recorded success and nothing awaits reconciliation.
func TestAnApprovalMeetingASettledActionReplaysIt(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return false, errLostReply
			}
			return true, nil
		}}
		store := open()
		tk := &ticket{attempts: 1, hold: make(chan struct{}), holding: make(chan struct{})}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Approver: tk,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)

		slow := make(chan envelope.Envelope)
		go func() { slow <- tool.Invoke(scoped(), lunch) }()
		<-tk.holding
		fast := tool.Invoke(scoped(), lunch)
		mustStatus(t, fast, envelope.Success)
		close(tk.hold)
		late := <-slow
		rec, err := store.Get(context.Background(), first.RequestRef)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("slow call: %s; record %v", late, rec.State)
		if late.Status == envelope.UnknownOutcome && !rec.AwaitsReconciliation(rec.Updated) {
			t.Fatalf("unknown_outcome (%s) for an action recorded %v: no record awaits reconciliation", late.Error.Message, rec.State)
		}
	})
}
