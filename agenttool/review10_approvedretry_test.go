package agenttool_test

import (
	"context"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// firstLost: attempt 1 is not delivered and its reply is lost (unknown);
// every later attempt delivers.
func firstLost() *mailServer {
	return &mailServer{script: func(n int) (bool, error) {
		if n == 1 {
			return false, errLostReply
		}
		return true, nil
	}}
}

// The model's next turn after unknown_outcome carries the identical resend
// and a reworded copy (parallel tool_calls, run one after the other). For a
// Reconcilable tool whose resend is found not applied and retried, the
// reworded copy is held (finish announces: claimed.TakenOver). The same turn
// against an at-most-once tool whose approver allows one more attempt, or
// after an operator's ResolveNotApplied, sent the email twice: the approved
// retry claims afresh (DecideClaim: claim(false, ...)), so its success was
// not announced, and the reworded copy found neither an unknown record nor
// a notice. A call that follows earlier attempts of its action now
// announces its success, and marks itself for the fence while it runs.
func TestReview10_ApprovedRetryThenRewordInOneTurn(t *testing.T) {
	const reworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you?"}`
	check := func(t *testing.T, tool *agenttool.Tool, m *mailServer, before func(first envelope.Envelope)) {
		t.Helper()
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		if before != nil {
			before(first)
		}
		// The next turn: identical resend, then the reworded copy.
		resend := tool.Invoke(scoped(), lunch)
		again := tool.Invoke(scoped(), reworded)
		t.Logf("resend:   %s", resend)
		t.Logf("reworded: %s", again)
		if n := m.count(); n != 1 {
			t.Errorf("one logical action (email Ana about lunch) left %d emails; the reworded call of the same turn said %s %v",
				n, again.Status, again.Error)
		}
	}

	t.Run("control/reconcilable-not-applied", func(t *testing.T) {
		m := firstLost()
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: ans,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		check(t, tool, m, func(envelope.Envelope) { ans.set(reconcile.NotAppliedFenced()) })
	})
	t.Run("atmostonce-approver-retryonce", func(t *testing.T) {
		m := firstLost()
		tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
			Approver: &ticket{attempts: 1}, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		check(t, tool, m, nil)
	})
	t.Run("operator-resolve-not-applied", func(t *testing.T) {
		m := firstLost()
		store := memstore.New()
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		check(t, tool, m, func(first envelope.Envelope) {
			if err := op.ResolveNotApplied(context.Background(), first.RequestRef, 1, "maria", "the mail log shows nothing"); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// The same turn in the other order: the reworded copy first, then the
// identical resend. The reworded call's fence asks about the unknown email,
// finds it not applied, approves it for a retry and sends the reworded
// email; the identical resend then consumed that approval and sent the
// original too. Resend first, the same turn sends one email (the control).
// A call that goes on in place of an action found not applied now
// announces its success: the resend is held for NoticeHold.
func TestReview10_RewordThenResendAfterNotApplied(t *testing.T) {
	const reworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you?"}`
	for _, order := range []string{"resend-first", "reworded-first"} {
		t.Run(order, func(t *testing.T) {
			m := firstLost()
			ans := &answers{answer: reconcile.StillPending()}
			tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: ans,
				Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
			first := tool.Invoke(scoped(), lunch)
			mustStatus(t, first, envelope.UnknownOutcome)
			ans.set(reconcile.NotAppliedFenced())
			calls := []string{lunch, reworded}
			if order == "reworded-first" {
				calls = []string{reworded, lunch}
			}
			var envs []envelope.Envelope
			for _, in := range calls {
				envs = append(envs, tool.Invoke(scoped(), in))
			}
			for i, e := range envs {
				t.Logf("call %d: %s", i+1, e)
			}
			if n := m.count(); n != 1 {
				t.Errorf("one logical action (email Ana about lunch) left %d emails after one turn of [%s]", n, order)
			}
		})
	}
}
