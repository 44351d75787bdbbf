package agenttool_test

import (
	"errors"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// An approval is bound to an attempt count, and a ticket stays approved.
// An approved retry that fails transiently releases the key (nothing
// happened), which deletes the record and its attempt count: the action
// starts again at attempt 1, and the next unknown outcome is "attempt 1"
// again, which the old ticket approves a second time.
func TestAReleasedApprovedRetryKeepsItsAttemptCount(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := &mailServer{script: func(n int) (bool, error) {
			switch n {
			case 1:
				return false, errLostReply // not delivered, reply lost
			case 2:
				return false, envelope.MarkTransient(errors.New("503 mail server busy")) // the approved retry: refused, nothing sent
			case 3:
				return true, errLostReply // delivered, reply lost
			}
			return true, nil
		}}
		tk := &ticket{attempts: 1} // maria approved one more attempt after the outcome of attempt 1
		tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.AtMostOnce, Approver: tk,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		for i := range 4 {
			env := tool.Invoke(scoped(), lunch) // the model asks again, each time with the same input
			t.Logf("call %d: %s", i+1, env)
		}
		t.Logf("approver asked about attempts %v; runs %d", tk.asked, m.runs.Load())
		if m.count() > 1 {
			t.Fatalf("one approval for attempt 1 allowed %d deliveries of one action", m.count())
		}
	})
}
