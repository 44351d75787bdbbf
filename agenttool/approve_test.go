package agenttool_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
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

// An approval is bound to the outcome it was given for: a slow approver's
// ticket for attempt 1 never allows a retry of attempt 2's outcome.
//
// An approval is checked against the attempt count the claim read, but
// applied (takeOver + notApplied) to whatever the record holds by then: a
// call whose approver is slow applies a ticket for attempt 1 to the outcome
// of attempt 2, and a second email goes out.
func TestApprove_BoundToTheOutcomeItSaw(t *testing.T) {
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

// Settling a record keeps its attempt count: an approval for an older
// attempt never matches it again.
//
// Operator.Reconcile of a dead holder's record (no reconciler: it is put
// back unknown) writes back the attempt count from before the takeover: the
// record's attempts go from 2 back to 1, and a ticket approved for attempt 1
// allows another attempt.
func TestApprove_SettlingKeepsTheAttemptCount(t *testing.T) {
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

// An approval that meets an action settled meanwhile replays its outcome; it
// never answers unknown_outcome.
//
// Two calls of one at-most-once action meet its unknown outcome and ask the
// approver; the fast one's approved retry succeeds. The slow one's
// takeover then finds the record succeeded (ErrNotUnknown) and answers
// unknown_outcome, "ask a person to confirm", although the store holds a
// recorded success and nothing awaits reconciliation.
func TestApprove_MeetingASettledActionReplaysIt(t *testing.T) {
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

// An approved retry that failed transiently keeps the action's attempt
// count: one approval allows one attempt.
//
// An approval is bound to an attempt count, and a ticket stays approved.
// An approved retry that fails transiently releases the key (nothing
// happened), which deletes the record and its attempt count: the action
// starts again at attempt 1, and the next unknown outcome is "attempt 1"
// again, which the old ticket approves a second time.
func TestApprove_ReleasedRetryKeepsItsAttemptCount(t *testing.T) {
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

// An approved retry, however it was approved, holds back a reworded copy of
// the same turn: one email.
//
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
func TestApprove_RetryHoldsARewordOfTheSameTurn(t *testing.T) {
	const reworded = lunchRephrased
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

// pauseApproval is a store whose next write of an approval (an unknown
// record finished RetryApproved), once armed, lands and then waits on
// release before returning to its writer.
type pauseApproval struct {
	agenttool.Store
	armed   atomic.Bool
	written chan struct{}
	release chan struct{}
}

func (p *pauseApproval) Finish(ctx context.Context, r storekit.FinishRequest) error {
	err := p.Store.Finish(ctx, r)
	if r.State == agenttool.Unknown && r.RetryApproved && p.armed.CompareAndSwap(true, false) {
		close(p.written)
		<-p.release
	}
	return err
}

// An approving call holds the scope's other writes from the approval to its
// claim.
//
// An at-most-once email with an Approver (a policy check that a person's
// ticket allows one retry). The first email's reply is lost. In the next
// turn the model sends the identical resend and a reworded copy at once.
// The resend asks the approver, which says RetryOnce: askApprover writes
// the record approved (holding.notApplied), lets it go, and only then
// claims it (`continue` in claimAndRun). Between the two writes the record
// is approved, unheld and not marked for the fence: the reworded copy's
// claim is not fenced, and it sends; the resend then claims the approval,
// finds no fenced record (the reworded call's record is a plain new claim)
// and no notice, and sends the original. Two emails in one turn, although
// the approval was applied by the resend itself, within the turn
// ("A retry approved by a person or a check holds the scope's other writes
// back while it runs"). The approving call now puts a notice before the
// approval, which holds the scope's other writes until its claim fences.
func TestApprove_ApprovalHoldsTheScopeUntilItsClaim(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := &pauseApproval{Store: open(), written: make(chan struct{}), release: make(chan struct{})}
		m := firstLost()
		approver := agenttool.ApproverFunc(func(_ context.Context, req agenttool.ApprovalRequest) (agenttool.Approval, error) {
			return agenttool.Approval{Decision: agenttool.RetryOnce, By: "ticket-123", Attempts: req.Attempts}, nil
		})
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Approver: approver,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)

		store.armed.Store(true)
		var resend envelope.Envelope
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); resend = tool.Invoke(scoped(), lunch) }()
		<-store.written
		reworded := tool.Invoke(scoped(), lunchRephrased)
		close(store.release)
		wg.Wait()
		t.Logf("resend:   %s", resend)
		t.Logf("reworded: %s", reworded)
		if n := m.count(); n != 1 {
			t.Errorf("one logical action, resent and reworded in one turn, sent %d emails (%v); want 1", n, m.effects)
		}
	})
}

// An approved retry fences its scope from its claim on: a reworded copy
// while it runs is held back.
//
// An approver's RetryOnce: the resend's call writes the approval and claims
// the record afresh. Its record was first pending and unmarked until the
// call marked it for the fence (one store round trip later), and a
// reworded copy of the same turn, running in parallel, that claimed inside
// that round trip ran too. The claim of an approved retry now marks the
// record itself: a reworded copy that runs while the approved retry's
// attempt is in flight is held back.
func TestApprove_RetryFencesFromItsClaim(t *testing.T) {
	inRetry, release := make(chan struct{}), make(chan struct{})
	m := &mailServer{script: func(n int) (bool, error) {
		switch n {
		case 1:
			return false, errLostReply // not delivered; the reply is lost
		case 2:
			close(inRetry) // the approved retry's attempt is in flight
			<-release
		}
		return true, nil
	}}
	tool := newEmailTool(t, m, agenttool.Options{WaitTimeout: 200 * time.Millisecond, Store: memstore.New(), Class: agenttool.AtMostOnce,
		Approver: &ticket{attempts: 1}, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)

	var resend envelope.Envelope
	done := make(chan struct{})
	go func() {
		defer close(done)
		resend = tool.Invoke(scoped(), lunch) // approved: one more attempt
	}()
	<-inRetry
	reworded := tool.Invoke(scoped(), lunchRephrased)
	close(release)
	<-done
	mustStatus(t, resend, envelope.Success)
	if reworded.Status != envelope.UnknownOutcome || reworded.Error.Code != envelope.CodeEarlierUnknown || reworded.Earlier.RequestRef != first.RequestRef {
		t.Errorf("the reworded copy while the approved retry runs: %s; want earlier_action_unknown", reworded)
	}
	if n := m.count(); n != 1 {
		t.Errorf("one logical action left %d emails (%v)", n, m.effects)
	}
}

// A compensation runs at most once per outcome (Approval): after one has
// failed, the record waits for an operator, and an approver's Compensate
// for the same attempt is not acted on again — also by a call that met the
// record before the failure and whose approver answered after it.
func TestApprove_CompensatesAtMostOncePerOutcome(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
		var refunds atomic.Int32
		hold, holding := make(chan struct{}), make(chan struct{})
		var asked atomic.Int32
		approver := agenttool.ApproverFunc(func(ctx context.Context, req agenttool.ApprovalRequest) (agenttool.Approval, error) {
			if asked.Add(1) == 1 {
				close(holding) // the first call's approver: a person reads the ticket
				<-hold
			}
			return agenttool.Approval{Decision: agenttool.Compensate, By: "maria", Reason: "refund it", Attempts: req.Attempts}, nil
		})
		tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.AtMostOnce, Approver: approver,
			Compensate: func(context.Context, agenttool.CallInfo) error {
				refunds.Add(1)
				return errors.New("refund refused: the provider is down")
			},
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)

		slow := make(chan envelope.Envelope)
		go func() { slow <- tool.Invoke(scoped(), lunch) }() // meets the unknown record; its approver is slow
		<-holding
		tool.Invoke(scoped(), lunch) // its approver answers Compensate at once: the compensation fails
		if refunds.Load() != 1 {
			t.Fatalf("the first compensation ran %d times", refunds.Load())
		}
		close(hold)
		late := <-slow
		if n := refunds.Load(); n != 1 {
			t.Errorf("the compensation of attempt 1 ran %d times; after it failed once, the record waits for an operator (late call: %s)", n, late)
		}
	})
}

// What an approver's backend answered (a ticket system's error, which may
// quote what a person wrote in the ticket) reaches the tool's log shown,
// not obeyed: C1 controls and bidi overrides are written as escapes, as
// the filter every human-facing output shares does (slog's JSON handler
// escapes only C0).
func TestApprove_ApproversErrorIsLoggedShownNotObeyed(t *testing.T) {
	var log bytes.Buffer
	m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
	approver := agenttool.ApproverFunc(func(context.Context, agenttool.ApprovalRequest) (agenttool.Approval, error) {
		return agenttool.Approval{}, errors.New("ticket 7: comment \u009b2J\u009d0;approved\u009c\u202edeifirev")
	})
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce, Approver: approver,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	mustStatus(t, tool.Invoke(scoped(), lunch), envelope.UnknownOutcome)
	tool.Invoke(scoped(), lunch) // the approver is asked, and fails
	got := log.String()
	if !strings.Contains(got, "ticket 7") {
		t.Fatalf("the approver's failure is not logged:\n%s", got)
	}
	for i, r := range got {
		if r < 0x20 && r != '\n' || r >= 0x7f && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			t.Fatalf("the log carries %U at byte %d:\n%q", r, i, got)
		}
	}
}
