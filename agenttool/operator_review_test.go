package agenttool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// A marked write (B, in place of A proved applied) closed as replaced by
// another conversation's write keeps its mark only for KeyTTL: the
// replacement sets Expires = now + TTL, not max(TTL, NoticeUntil) as
// DecideFinish does for an approved marked record. Past that, B's own
// conversation asks for B again and it runs: A and B (A reworded) both
// delivered.
func TestOperator_AReplacedMarkedWriteKeepsItsMarkPastItsKeyLifetime(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store, clk := open(), newClock()
		m := &mailServer{script: sentThenNotSent}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Now: clk.Now, Fence: agenttool.FencePrincipal,
			AttemptTimeout: 30 * time.Second, ClockSkew: time.Second, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		a := tool.Invoke(scoped(), lunch)
		mustStatus(t, a, envelope.UnknownOutcome)
		clk.Advance(32 * time.Second)
		if err := op.ResolveNotApplied(ctx, a.RequestRef, 1, "maria", "not in the mail log"); err != nil {
			t.Fatal(err)
		}
		b := tool.Invoke(scoped(), lunchRephrased)
		mustStatus(t, b, envelope.UnknownOutcome)
		if v, err := op.SettleByAnswer(ctx, a.RequestRef, 1, reconcile.AppliedWith([]byte(`{"id":"m-1"}`)), "late"); v != reconcile.Applied || !errors.Is(err, agenttool.ErrContradicted) {
			t.Fatalf("late answer about A: %v, %v", v, err)
		}
		clk.Advance(32 * time.Second)
		rec, err := op.Show(ctx, b.RequestRef)
		if err != nil {
			t.Fatal(err)
		}
		if err := op.ResolveNotApplied(ctx, b.RequestRef, rec.Attempts, "maria", "not in the mail log"); err != nil {
			t.Fatal(err)
		}
		if rec, _ := op.Show(ctx, b.RequestRef); true {
			t.Logf("B approved: %v approved=%v mark=%v expires=%v", rec.State, rec.RetryApproved, rec.NoticeUntil, rec.Expires)
		}
		clk.Advance(7 * time.Hour) // past A's notice (NoticeBackstop): it no longer holds the principal's writes
		other := agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10")
		bob := tool.Invoke(other, `{"to":"bob@example.com","subject":"Invoice","body":"Attached."}`)
		mustStatus(t, bob, envelope.Success)
		if rec, _ := op.Show(ctx, b.RequestRef); true {
			t.Logf("B replaced by Bob's: %v replacedBy=%s mark=%v expires=%v", rec.State, rec.ReplacedBy, rec.NoticeUntil, rec.Expires)
		}
		clk.Advance(25 * time.Hour) // conversation-9 comes back the next day
		if _, err := op.SweepOnce(ctx, agenttool.SweeperOptions{}); err != nil {
			t.Fatal(err)
		}
		again := tool.Invoke(scoped(), lunchRephrased)
		t.Logf("B asked again the next day: %s", again)
		if n := m.sent(b.RequestRef) + m.sent(a.RequestRef); n != 1 {
			t.Errorf("one logical action (email Ana about lunch) left %d emails (%v): B ran untold after A was proved applied", n, m.effects)
		}
		if again.Error == nil || again.Error.Code != envelope.CodeEarlierApplied {
			t.Errorf("B asked again: %s; want earlier_action_applied naming A (%s)", again, a.RequestRef)
		}
	})
}

// Under a principal's fence, the write that went on in A's place may be
// another conversation's (any new write of the scope takes an approved
// action's place). A late answer proving A applied marks it all the
// same: the other conversation's writes are held back, and its model is
// told earlier_action_applied naming A, an email of a conversation it
// never saw, as if its own write had been a rewording of it.
func TestOperator_AWriteOfAnotherConversationIsNotMarkedForAnActionItReplaced(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store, clk := open(), newClock()
		m := &mailServer{script: sentThenNotSent}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Now: clk.Now, Fence: agenttool.FencePrincipal,
			AttemptTimeout: 30 * time.Second, ClockSkew: time.Second, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		a := tool.Invoke(scoped(), lunch) // conversation-9
		mustStatus(t, a, envelope.UnknownOutcome)
		clk.Advance(32 * time.Second)
		if err := op.ResolveNotApplied(ctx, a.RequestRef, 1, "maria", "not in the mail log"); err != nil {
			t.Fatal(err)
		}
		other := agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10")
		const invoice = `{"to":"bob@example.com","subject":"Invoice","body":"Attached."}`
		c := tool.Invoke(other, invoice) // goes on in A's place: another conversation, another email
		mustStatus(t, c, envelope.UnknownOutcome)
		if rec, _ := op.Show(ctx, a.RequestRef); rec.ReplacedBy != c.RequestRef {
			t.Fatalf("A replaced by %q, want C", rec.ReplacedBy)
		}
		v, err := op.SettleByAnswer(ctx, a.RequestRef, 1, reconcile.AppliedWith([]byte(`{"id":"m-1"}`)), "late")
		t.Logf("late answer about A: %v, %v", v, err)
		rec, _ := op.Show(ctx, c.RequestRef)
		t.Logf("C (conversation-10's invoice): %v marked=%v", rec.State, rec.StandsInForApplied())
		clk.Advance(7 * time.Hour) // past A's own notice
		next := tool.Invoke(other, `{"to":"carol@example.com","subject":"Agenda","body":"Attached."}`)
		t.Logf("conversation-10's next write: %s", next)
		if rec.StandsInForApplied() || (next.Error != nil && next.Error.Code == envelope.CodeEarlierApplied && next.Earlier != nil && next.Earlier.RequestRef == a.RequestRef) {
			t.Errorf("conversation-10's write C was marked as standing in for conversation-9's A, and its model told of A (%s)", a.RequestRef)
		}
	})
}
