package agenttool_test

import (
	"context"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// literal is a model that does what `next` says, turn after turn, for one
// input: wait → wait, then call again with the same input; ask_human → ask,
// and (here) the human says nothing new yet, so stop; anything else: stop.
// It returns every envelope it read.
func literal(t *testing.T, ctx context.Context, tool *agenttool.Tool, in string, first envelope.Envelope, pause time.Duration, turns int) []envelope.Envelope {
	t.Helper()
	seen := []envelope.Envelope{first}
	env := first
	for i := 0; i < turns && env.Next == envelope.Wait; i++ {
		time.Sleep(pause)
		env = tool.Invoke(ctx, in)
		if err := env.Validate(); err != nil {
			t.Errorf("invalid envelope %s: %v", env, err)
		}
		seen = append(seen, env)
	}
	return seen
}

// Turn 1: the Ana email is not delivered, its reply lost: unknown. Turn 2:
// the model sends a reworded copy (B) and the identical resend (A') at
// once; B's fence finds A not applied and goes on in its place; B's SMTP
// exchange is slower than WaitTimeout. A' is told (in-place-of variant of
// inProgress): "This was not done; another send_email (B) is to be done in
// its place ... Tell the user it is pending, and wait before calling
// send_email again." next: wait. B is delivered.
//
// The model does exactly that: it waits, then calls send_email again with
// the same input. If its wait is longer than NoticeHold, the call runs the
// approval B's deferred settlement left on A: Ana gets the email twice (B,
// then A). Nothing in A's envelope says that calling again will send it
// (the keyed "it will not run twice" promise is gone, but "wait before
// calling again" still invites the call). TestReview12_ResendWhileReplaced
// checked this and now skips (it looks for code in_progress).
func TestReview14_LiteralModelAfterInPlaceSendsOnce(t *testing.T) {
	const hold = 200 * time.Millisecond
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		g := newGatedMail(2)
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: open(), Class: agenttool.Reconcilable, Reconciler: ans,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 50 * time.Millisecond, NoticeHold: hold})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		ans.set(reconcile.NotAppliedFenced())

		var b envelope.Envelope
		done := make(chan struct{})
		go func() { defer close(done); b = tool.Invoke(scoped(), review11Reworded) }()
		<-g.started
		resend := tool.Invoke(scoped(), lunch)
		close(g.gate)
		<-done
		t.Logf("B:  %s", b)
		t.Logf("A': %s", resend)
		if resend.Next != envelope.Wait {
			t.Skipf("A' was not told to wait: %s", resend)
		}
		// The model waits (its next turn comes later than NoticeHold), then calls again, as told.
		for i, e := range literal(t, scoped(), tool, lunch, resend, hold+100*time.Millisecond, 3)[1:] {
			t.Logf("A' after waiting, call %d: %s", i+1, e)
		}
		if n := g.count(); n != 1 {
			t.Errorf("one email to Ana was asked for; following next=wait literally sent %d (%v)", n, g.effects)
		}
	})
}

// The same turn, watched through Options.Hooks: every envelope that says
// the call was held back by an earlier action (earlier_action_unknown,
// earlier_action_applied) should come with a Fenced event naming the call
// and that earlier action (observe.Log turns it into the WARN "held back by
// an earlier action" the README tells operators to watch for).
func TestReview14_HeldBackWithAFencedEvent(t *testing.T) {
	g := newGatedMail(2)
	ans := &answers{answer: reconcile.StillPending()}
	var mu sync.Mutex
	var fenced []agenttool.FencedEvent
	var outcomes []envelope.Envelope
	hooks := agenttool.Hooks{
		Fenced: func(_ context.Context, e agenttool.FencedEvent) { mu.Lock(); fenced = append(fenced, e); mu.Unlock() },
		Outcome: func(_ context.Context, e agenttool.OutcomeEvent) {
			mu.Lock()
			outcomes = append(outcomes, e.Envelope)
			mu.Unlock()
		},
	}
	tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: ans,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 50 * time.Millisecond, Hooks: hooks})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	ans.set(reconcile.NotAppliedFenced())
	done := make(chan struct{})
	go func() { defer close(done); tool.Invoke(scoped(), review11Reworded) }()
	<-g.started
	tool.Invoke(scoped(), lunch)
	close(g.gate)
	<-done
	mu.Lock()
	defer mu.Unlock()
	for _, env := range outcomes {
		if env.Error == nil || (env.Error.Code != envelope.CodeEarlierUnknown && env.Error.Code != envelope.CodeEarlierApplied) {
			continue
		}
		found := false
		for _, f := range fenced {
			found = found || (f.RequestRef == env.RequestRef && env.Earlier != nil && f.Earlier == env.Earlier.RequestRef)
		}
		if !found {
			t.Errorf("outcome %s says the call was held back (%s), but no Fenced event names %s (events: %+v)", env.RequestRef, env.Error.Code, env.RequestRef, fenced)
		}
	}
}

// The keyed variant: the destination dedupes by RequestRef, and the first
// envelope told the model "Calling send_email again later with the same
// input is safe". The reworded copy has another reference, so the literal
// model that calls again later (after NoticeHold) books the same thing
// twice.
func TestReview14_LiteralWaitAfterInPlaceKeyed(t *testing.T) {
	const hold = 200 * time.Millisecond
	g := newGatedMail(2)
	g.dedupe = true
	ans := &answers{answer: reconcile.StillPending()}
	tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Reconciler: ans,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 50 * time.Millisecond, NoticeHold: hold})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	t.Logf("A:  %s", first)
	ans.set(reconcile.NotAppliedFenced())
	var b envelope.Envelope
	done := make(chan struct{})
	go func() { defer close(done); b = tool.Invoke(scoped(), review11Reworded) }()
	<-g.started
	resend := tool.Invoke(scoped(), lunch)
	close(g.gate)
	<-done
	t.Logf("B:  %s", b)
	t.Logf("A': %s", resend)
	for i, e := range literal(t, scoped(), tool, lunch, resend, hold+100*time.Millisecond, 3)[1:] {
		t.Logf("A' after waiting, call %d: %s", i+1, e)
	}
	if n := g.count(); n != 1 {
		t.Errorf("one email to Ana was asked for; following next=wait literally sent %d (%v)", n, g.effects)
	}
}
