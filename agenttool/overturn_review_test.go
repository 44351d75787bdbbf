package agenttool_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// I1 when an approved attempt sent nothing. An at-most-once email's attempt
// 1 is delivered and its reply lost; a person resolves it not applied (one
// more attempt approved). The approved attempt is refused before it is
// sent (transient): the key is given back approved, its count at 2, so that
// the approval for attempt 1 is not used again. Then the destination's late
// answer to attempt 1 comes: delivered. The approval still rests on the
// finding that no attempt applied — attempt 2 sent nothing — and the answer
// proves it wrong; dropped as about "another attempt", it let the next call
// deliver the email a second time.
func TestOperator_AnAnswerOverturnsAnApprovalWhoseApprovedAttemptSentNothing(t *testing.T) {
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
		second := tool.Invoke(scoped(), lunch)
		mustStatus(t, second, envelope.DefiniteFailure)
		if rec, _ := op.Show(ctx, first.RequestRef); rec.State != agenttool.Unknown || !rec.RetryApproved || rec.Attempts != 2 {
			t.Fatalf("after the approved attempt sent nothing: %v, approved %v, attempts %d; want approved at 2", rec.State, rec.RetryApproved, rec.Attempts)
		}
		if v, err := op.SettleByAnswer(ctx, first.RequestRef, 3, reconcile.AppliedWith([]byte(`{"id":"m-1"}`)), "late"); !errors.Is(err, agenttool.ErrStale) {
			t.Errorf("an answer about an attempt the record never counted: %v, %v; want ErrStale", v, err)
		}
		v, err := op.SettleByAnswer(ctx, first.RequestRef, 1, reconcile.AppliedWith([]byte(`{"id":"m-1"}`)), "late")
		if err != nil || v != reconcile.Applied {
			t.Errorf("the late answer that attempt 1 applied: %v, %v; want applied", v, err)
		}
		if rec, _ := op.Show(ctx, first.RequestRef); rec.State != agenttool.Succeeded || !rec.HoldsSlot() {
			t.Errorf("after the answer: %v, holds its slot %v; want succeeded, holding the slot with its notice (I9)", rec.State, rec.HoldsSlot())
		}
		reworded := tool.Invoke(scoped(), lunchRephrased)
		t.Logf("a reworded copy after the answer: %s", reworded)
		if reworded.Status == envelope.Success && reworded.Earlier == nil {
			t.Errorf("a reworded copy ran as a new action after the answer: %s", reworded)
		}
		third := tool.Invoke(scoped(), lunch)
		t.Logf("after the answer: %s", third)
		if third.Status != envelope.Success || string(third.Result) != `{"id":"m-1"}` {
			t.Errorf("the next call: %s; want the answer's success, replayed", third)
		}
		if n := m.count(); n != 1 {
			t.Errorf("%d emails for one action, want 1", n)
		}
	})
}

// An applied answer that meets an approval while the approved attempt runs
// (or just after) never settles what that attempt did: between the
// answer's read of the record and its claim, the approved attempt runs and
// its outcome is unknown at attempt 2 — the record is given back unknown,
// awaiting reconciliation, not approved and not settled.
func TestOperator_AnAnswerThatMeetsTheApprovedAttemptSettlesNothing(t *testing.T) {
	store := &betweenStore{Store: openBolt(t, t.TempDir()+"/keys.db")}
	m := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
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
	between := func() { mustStatus(t, tool.Invoke(scoped(), lunch), envelope.UnknownOutcome) }
	store.between.Store(&between)
	v, err := op.SettleByAnswer(ctx, first.RequestRef, 1, reconcile.AppliedWith([]byte(`{"id":"m-1"}`)), "late")
	if !errors.Is(err, agenttool.ErrStale) {
		t.Errorf("an answer about attempt 1 once attempt 2 ran: %v, %v; want ErrStale", v, err)
	}
	rec, _ := op.Show(ctx, first.RequestRef)
	if rec.State != agenttool.Unknown || rec.RetryApproved || rec.Attempts != 2 || !rec.AwaitsReconciliation(time.Now()) {
		t.Errorf("after: %v at %d, approved %v; want unknown at 2, awaiting reconciliation", rec.State, rec.Attempts, rec.RetryApproved)
	}
	if again := tool.Invoke(scoped(), lunch); again.Status != envelope.UnknownOutcome || m.runs.Load() != 2 {
		t.Errorf("the next call: %s, %d runs; want unknown_outcome and nothing run", again, m.runs.Load())
	}
}

// An applied answer and the approved attempt's call race for one approval:
// whichever claims it first, the action's attempt runs at most once more,
// the record ends settled, and every envelope tells the truth: the call
// answers success only for an effect, and the answer settles the action
// only if the attempt did not run.
func TestOperator_AnAnswerAndTheApprovedCallRaceForOneApproval(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		for i := range 20 {
			m := &mailServer{script: func(n int) (bool, error) {
				if n == 1 {
					return true, errLostReply
				}
				return true, nil
			}}
			tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{MaxAttempts: 1},
				WaitTimeout: 5 * time.Second})
			op, err := agenttool.NewOperator(store, tool)
			if err != nil {
				t.Fatal(err)
			}
			ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", "race-"+string(rune('a'+i)))
			first := tool.Invoke(ctx, lunch)
			mustStatus(t, first, envelope.UnknownOutcome)
			if err := op.ResolveNotApplied(context.Background(), first.RequestRef, 1, "maria", "nothing yet"); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var v reconcile.Verdict
			var verr error
			var env envelope.Envelope
			wg.Add(2)
			go func() {
				defer wg.Done()
				v, verr = op.SettleByAnswer(context.Background(), first.RequestRef, 1, reconcile.AppliedWith([]byte(`{"id":"m-1"}`)), "late")
			}()
			go func() { defer wg.Done(); env = tool.Invoke(ctx, lunch) }()
			wg.Wait()
			rec, _ := op.Show(context.Background(), first.RequestRef)
			runs := m.runs.Load()
			t.Logf("round %d: answer %v (%v); call ran %d, answered %s", i, v, verr, runs, env.Status)
			if v == reconcile.Applied {
				if verr != nil || runs != 1 || env.Status != envelope.Success || string(env.Result) != `{"id":"m-1"}` || rec.State != agenttool.Succeeded {
					t.Errorf("round %d: the answer settled (%v), and the call ran %d times, answered %s; record %v", i, verr, runs, env, rec.State)
				}
				continue
			}
			if !errors.Is(verr, agenttool.ErrBusy) && !errors.Is(verr, agenttool.ErrNotUnknown) && !errors.Is(verr, agenttool.ErrStale) {
				t.Errorf("round %d: the answer settled nothing, with %v", i, verr)
			}
			if runs != 2 || env.Status != envelope.Success || rec.State != agenttool.Succeeded {
				t.Errorf("round %d: the answer settled nothing (%v); the call ran %d times, answered %s; record %v", i, verr, runs, env, rec.State)
			}
		}
	})
}

// An approval past its key's lifetime holds nothing: an applied answer then
// settles nothing and leaves no record behind (no claim of its own, no
// approval out of nothing).
func TestOperator_AnAnswerForAnExpiredApprovalLeavesNoRecord(t *testing.T) {
	clk := newClock()
	store := openBolt(t, t.TempDir()+"/keys.db")
	m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Now: clk.Now, KeyTTL: 4 * time.Minute})
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
	clk.Advance(5 * time.Minute)
	v, err := op.SettleByAnswer(ctx, first.RequestRef, 1, reconcile.AppliedWith([]byte(`{"id":"m-1"}`)), "late")
	t.Logf("answer for an expired approval: %v, %v", v, err)
	if v == reconcile.Applied {
		t.Errorf("an expired approval was settled applied")
	}
	if rec, err := store.Get(ctx, first.RequestRef); err == nil && (rec.State == agenttool.Pending || rec.Attempts == 0) {
		t.Errorf("after: %v at %d, owner %q; want the expired record, or none", rec.State, rec.Attempts, rec.Owner)
	}
}

// I1 across a change of the fence setting. An action is unknown under the
// session fence, and a person approves one more attempt; the tool's fence
// is then turned off, and another action of the session goes unknown
// beside the first one's slot. The destination's answer that the first
// action's attempt applied then comes: its claim of the approval was held
// back as a new write of the scope would be (by the unsettled action
// beside the slot), the answer dropped ("it is State(0)"), and the next
// call of the first action delivered it a second time. Settling runs
// nothing: the fence does not hold it back, and the record keeps its scope.
func TestOperator_AnAnswerOverturnsAnApprovalWhateverElseTheScopeAwaits(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) {
			if n <= 2 {
				return true, errLostReply
			}
			return true, nil
		}}
		before := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
		after := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Fence: agenttool.FenceOff})
		op, err := agenttool.NewOperator(store, after)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		first := before.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		if err := op.ResolveNotApplied(ctx, first.RequestRef, 1, "maria", "nothing yet"); err != nil {
			t.Fatal(err)
		}
		was, _ := op.Show(ctx, first.RequestRef)
		other := after.Invoke(scoped(), lunchRephrased)
		mustStatus(t, other, envelope.UnknownOutcome)
		v, err := op.SettleByAnswer(ctx, first.RequestRef, 1, reconcile.AppliedWith([]byte(`{"id":"m-1"}`)), "late")
		if err != nil || v != reconcile.Applied {
			t.Errorf("the late answer that attempt 1 applied: %v, %v; want applied", v, err)
		}
		rec, _ := op.Show(ctx, first.RequestRef)
		if rec.State != agenttool.Succeeded || rec.FenceScope != was.FenceScope {
			t.Errorf("after the answer: %v, scope kept %v; want succeeded, in the scope it held", rec.State, rec.FenceScope == was.FenceScope)
		}
		again := after.Invoke(scoped(), lunch)
		if again.Status != envelope.Success || string(again.Result) != `{"id":"m-1"}` {
			t.Errorf("the next call: %s; want the answer's success, replayed", again)
		}
		n := 0
		for _, e := range m.effects {
			if e == first.RequestRef {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d emails for the first action, want 1", n)
		}
	})
}
