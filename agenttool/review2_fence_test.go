package agenttool_test

import (
	"context"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// A keyed tool (with a reconciler for the fence) retries its own unknown
// action B with the same key. The fence finds another unknown action A of
// the session done and holds B back: B's envelope is definite_failure
// ("this call applied nothing") although B's own effect happened, its
// record is still unknown, and `earlier` speaks of A, not of B.
func TestI9_AHeldBackRetryOfAnUnknownActionIsNotDefinite(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		var mu sync.Mutex
		delivered := map[string]int{} // by request reference (the destination dedupes by key)
		bInside, bGo := make(chan struct{}), make(chan struct{})
		send := func(ctx context.Context, in emailInput) (sent, error) {
			ref := agenttool.RequestRef(ctx)
			mu.Lock()
			first := delivered[ref] == 0
			delivered[ref] = 1
			mu.Unlock()
			if in.Subject == "Lunch on Friday" && first {
				close(bInside) // B is on the wire; its reply will be lost
				<-bGo
			}
			return sent{}, errLostReply
		}
		check := &answers{answer: reconcile.AppliedWith([]byte(`{"message_id":"<a@mail.test>"}`))}
		store := open()
		tool, err := agenttool.New("send_email", "Send.", send, agenttool.Options{Store: store, Class: agenttool.Keyed,
			Reconciler: check, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		bDone := make(chan envelope.Envelope)
		go func() { bDone <- tool.Invoke(scoped(), lunchReworded) }()
		<-bInside
		a := tool.Invoke(scoped(), lunch) // A runs while B is in flight (not unknown yet): reply lost
		mustStatus(t, a, envelope.UnknownOutcome)
		close(bGo)
		b := <-bDone
		mustStatus(t, b, envelope.UnknownOutcome) // "calling again later with the same input is safe"

		again := tool.Invoke(scoped(), lunchReworded) // the model follows B's note
		t.Logf("B again: %s", again)
		rec, err := store.Get(context.Background(), b.RequestRef)
		t.Logf("B's record: %v (%v)", rec.State, err)
		mu.Lock()
		bApplied := delivered[b.RequestRef] > 0
		mu.Unlock()
		if again.RequestRef == b.RequestRef && again.Status == envelope.DefiniteFailure && bApplied &&
			(again.Earlier == nil || again.Earlier.RequestRef != b.RequestRef) {
			t.Fatalf("definite_failure for %s, whose effect happened (record %v); earlier names %s",
				b.RequestRef, rec.State, again.Earlier.RequestRef)
		}
	})
}

// gate is a reconciler whose answer the test sets; while blocking is set, a
// check waits until the test opens the gate (a slow status API).
type gate struct {
	mu       sync.Mutex
	answer   reconcile.Answer
	blocking bool
	entered  chan struct{}
	open     chan struct{}
}

func (g *gate) set(ans reconcile.Answer, block bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.answer, g.blocking = ans, block
	if block {
		g.entered, g.open = make(chan struct{}), make(chan struct{})
	}
}

func (g *gate) Check(ctx context.Context, req reconcile.Request) reconcile.Answer {
	g.mu.Lock()
	ans, block, entered, open := g.answer, g.blocking, g.entered, g.open
	g.blocking = false // only the first check waits
	g.mu.Unlock()
	if block {
		close(entered)
		<-open
	}
	return ans
}

// While a sweeper (or an operator, an approver, another call's fence) has
// taken an unknown action over to ask the destination, its record is
// pending with a live lease, which the fence index does not count: a
// reworded resend in the same session is not fenced and runs. The check
// then finds the first email delivered: two emails.
func TestI9_TheFenceHoldsWhileTheSweeperChecks(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply // A: delivered, reply lost
			}
			return true, nil
		}}
		g := &gate{answer: reconcile.StillPending()}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: g})
		a := tool.Invoke(scoped(), lunch)
		mustStatus(t, a, envelope.UnknownOutcome)

		op, _ := agenttool.NewOperator(store, tool)
		g.set(reconcile.AppliedWith([]byte(`{"message_id":"<a@mail.test>"}`)), true)
		swept := make(chan agenttool.SweepReport)
		go func() { rep, _ := op.SweepOnce(context.Background(), agenttool.SweeperOptions{}); swept <- rep }()
		<-g.entered // the sweeper is asking the mailbox about A

		b := tool.Invoke(scoped(), lunchReworded) // the model rewords and resends
		t.Logf("reworded resend while A is being checked: %s", b)
		close(g.open)
		t.Logf("sweep: %+v", <-swept)
		if m.count() > 1 {
			t.Fatalf("%d emails: the reworded resend ran while A's outcome was unknown (being checked), and A was delivered", m.count())
		}
	})
}

// The same with two reworded resends from parallel goroutines: the first
// one's fence takes A over to check it; the second one's claim no longer
// sees A and runs.
func TestI9_TheFenceHoldsAgainstParallelRewords(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply // A: delivered, reply lost
			}
			return true, nil
		}}
		g := &gate{answer: reconcile.StillPending()}
		tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.Reconcilable, Reconciler: g})
		a := tool.Invoke(scoped(), lunch)
		mustStatus(t, a, envelope.UnknownOutcome)

		g.set(reconcile.StillPending(), true)
		first := make(chan envelope.Envelope)
		go func() { first <- tool.Invoke(scoped(), lunchReworded) }()
		<-g.entered // reword 1's fence is asking about A
		second := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch Friday?","body":"Noon on Friday?"}`)
		close(g.open)
		t.Logf("reword 1: %s", <-first)
		t.Logf("reword 2: %s", second)
		if m.count() > 1 {
			t.Fatalf("%d emails while A was unknown (the mailbox still says pending)", m.count())
		}
	})
}
