package agenttool_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
)

// ticket is an approver backed by one ticket that a person approved for the
// outcome of attempt `attempts`: it stays approved, as a ticket does. When
// hold is set, the first request waits on it (a person reading the ticket).
type ticket struct {
	attempts int
	mu       sync.Mutex
	asked    []int
	hold     chan struct{}
	holding  chan struct{}
}

func (tk *ticket) Approve(ctx context.Context, req agenttool.ApprovalRequest) (agenttool.Approval, error) {
	tk.mu.Lock()
	tk.asked = append(tk.asked, req.Attempts)
	first := len(tk.asked) == 1
	tk.mu.Unlock()
	if first && tk.hold != nil {
		close(tk.holding)
		<-tk.hold
	}
	return agenttool.Approval{Decision: agenttool.RetryOnce, By: "maria", Reason: "ticket 7", Attempts: tk.attempts}, nil
}

// An approval is checked against the attempt count the claim read, but
// applied (takeOver + notApplied) to whatever the record holds by then: a
// call whose approver is slow applies a ticket for attempt 1 to the outcome
// of attempt 2, and a second email goes out.
func TestApprovalForAnOlderOutcomeIsNotAppliedToANewer(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := &mailServer{script: func(n int) (bool, error) {
			switch n {
			case 1:
				return false, errLostReply // attempt 1: not delivered, reply lost
			case 2:
				return true, errLostReply // attempt 2 (the approved retry): delivered, reply lost
			}
			return true, nil
		}}
		tk := &ticket{attempts: 1, hold: make(chan struct{}), holding: make(chan struct{})}
		tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.AtMostOnce, Approver: tk,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)

		// The model asks twice; the approver answers the first slowly.
		slow := make(chan envelope.Envelope)
		go func() { slow <- tool.Invoke(scoped(), lunch) }()
		<-tk.holding
		fast := tool.Invoke(scoped(), lunch) // ticket for attempt 1: one more attempt, delivered, unknown again
		t.Logf("fast: %s", fast)
		close(tk.hold)
		late := <-slow
		t.Logf("slow: %s", late)
		t.Logf("approver asked about attempts %v; effects %v", tk.asked, m.effects)
		if m.count() > 1 {
			t.Fatalf("one approval for attempt 1 allowed %d deliveries of one action", m.count())
		}
	})
}

// Operator.Reconcile of a dead holder's record (no reconciler: it is put
// back unknown) writes back the attempt count from before the takeover: the
// record's attempts go from 2 back to 1, and a ticket approved for attempt 1
// allows another attempt.
func TestSettlingKeepsTheAttemptCount(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		c := newClock()
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return false, errLostReply // attempt 1: not delivered, reply lost
			}
			return true, nil
		}}
		fs := &lostSuccess{Store: open()}
		tk := &ticket{attempts: 1}
		tool := newEmailTool(t, m, agenttool.Options{Store: fs, Class: agenttool.AtMostOnce, Approver: tk, Now: c.Now,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)

		// The approved retry delivers; its outcome cannot be recorded (the
		// process dies, as far as the store knows).
		fs.fail.Store(true)
		retried := tool.Invoke(scoped(), lunch)
		fs.fail.Store(false)
		t.Logf("approved retry: %s", retried)
		c.Advance(2 * time.Minute) // its lease lapses

		op, err := agenttool.NewOperator(fs, tool)
		if err != nil {
			t.Fatal(err)
		}
		before, _ := fs.Get(context.Background(), first.RequestRef)
		_, rerr := op.Reconcile(context.Background(), first.RequestRef, "sam")
		after, _ := fs.Get(context.Background(), first.RequestRef)
		t.Logf("operator reconcile: %v; record %v/attempts %d -> %v/attempts %d", rerr, before.State, before.Attempts, after.State, after.Attempts)

		again := tool.Invoke(scoped(), lunch) // the model asks again; the ticket still says attempt 1
		t.Logf("again: %s", again)
		t.Logf("approver asked about attempts %v", tk.asked)
		if m.count() > 1 {
			t.Fatalf("%d deliveries of one action: a ticket for attempt 1 was honoured twice", m.count())
		}
	})
}

// lostSuccess is a store that cannot record a success while fail is set:
// the process "dies" after the effect, before its record.
type lostSuccess struct {
	agenttool.Store
	fail atomic.Bool
}

func (l *lostSuccess) Finish(ctx context.Context, r storekit.FinishRequest) error {
	if l.fail.Load() && r.State == agenttool.Succeeded {
		return errors.New("connection to store refused")
	}
	return l.Store.Finish(ctx, r)
}
