package agenttool_test

import (
	"context"
	"errors"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// I1 and I2 when an answer proves done an action that was replaced. An
// at-most-once email's attempt 1 is delivered and its reply lost; a person
// finds it not applied, and a reworded copy goes on in its place (the
// first closed as failed, replaced by it), sends nothing (503) and is
// given back approved. Then the late answer to attempt 1 comes: delivered.
// Answered ErrContradicted and dropped, it left the first action to go on
// in the copy's place when asked again: the same key sent the email a
// second time, and the call said success at attempt 2. The answer settles
// the action in the copy's place, as a call of it would claim it: the
// copy is closed as replaced by it, and it holds the slot settled applied.
func TestOperator_AnAnswerSettlesAReplacedActionInItsReplacementsPlace(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) {
			switch n {
			case 1:
				return true, errLostReply // delivered, reply lost
			case 2:
				return false, envelope.MarkTransient(errors.New("503 busy")) // nothing sent
			}
			return true, nil
		}}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		if err := op.ResolveNotApplied(ctx, first.RequestRef, 1, "maria", "nothing yet"); err != nil {
			t.Fatal(err)
		}
		reworded := tool.Invoke(scoped(), lunchRephrased)
		t.Logf("reworded: %s", reworded)
		if rec, _ := op.Show(ctx, first.RequestRef); rec.State != agenttool.Failed || rec.ReplacedBy != reworded.RequestRef {
			t.Fatalf("the first action after the reworded copy: %v replaced by %q", rec.State, rec.ReplacedBy)
		}
		v, err := op.SettleByAnswer(ctx, first.RequestRef, 1, reconcile.AppliedWith([]byte(`{"id":"m-1"}`)), "late")
		t.Logf("the late answer that attempt 1 applied: %v, %v", v, err)
		if err != nil || v != reconcile.Applied {
			t.Errorf("the late answer: %v, %v; want applied", v, err)
		}
		a, _ := op.Show(ctx, first.RequestRef)
		b, _ := op.Show(ctx, reworded.RequestRef)
		if a.State != agenttool.Succeeded || !a.HoldsSlot() || b.State != agenttool.Failed || b.ReplacedBy != first.RequestRef {
			t.Errorf("after the answer: the action %v (holds the slot %v), the copy %v replaced by %q; want the action done in the copy's place",
				a.State, a.HoldsSlot(), b.State, b.ReplacedBy)
		}
		again := tool.Invoke(scoped(), lunch)
		t.Logf("the first action asked again: %s", again)
		rew := tool.Invoke(scoped(), lunchRephrased)
		t.Logf("the reworded copy asked again: %s", rew)
		if n := m.count(); n != 1 {
			t.Errorf("%d emails for one logical action (%v), want 1: the answer proved it done", n, m.effects)
		}
		if again.Status != envelope.Success || string(again.Result) != `{"id":"m-1"}` {
			t.Errorf("the action asked again: %s; want the answer's success, replayed", again)
		}
		for _, env := range []envelope.Envelope{again, rew} {
			if env.Status == envelope.DefiniteFailure && (env.Error == nil || env.Error.Code != envelope.CodeReplaced) {
				t.Errorf("told definite failure after the answer proved it done: %s", env)
			}
		}
	})
}

// What the answer cannot settle: the copy that went on in the replaced
// action's place may have sent (its outcome unknown). Nothing is settled
// (ErrContradicted, for a person), and both records stay as they were.
func TestOperator_AnAnswerAboutAReplacedActionWhoseCopyMayHaveSentIsContradicted(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		if err := op.ResolveNotApplied(ctx, first.RequestRef, 1, "maria", "nothing yet"); err != nil {
			t.Fatal(err)
		}
		reworded := tool.Invoke(scoped(), lunchRephrased)
		mustStatus(t, reworded, envelope.UnknownOutcome)
		v, err := op.SettleByAnswer(ctx, first.RequestRef, 1, reconcile.AppliedWith([]byte(`{"id":"m-1"}`)), "late")
		if !errors.Is(err, agenttool.ErrContradicted) || v == reconcile.Applied {
			t.Errorf("the late answer, the copy in its place unknown: %v, %v; want ErrContradicted", v, err)
		}
		a, _ := op.Show(ctx, first.RequestRef)
		b, _ := op.Show(ctx, reworded.RequestRef)
		if a.State != agenttool.Failed || a.ReplacedBy != reworded.RequestRef || b.State != agenttool.Unknown || b.RetryApproved {
			t.Errorf("after: the action %v replaced by %q, the copy %v approved %v; want both as they were", a.State, a.ReplacedBy, b.State, b.RetryApproved)
		}
	})
}
