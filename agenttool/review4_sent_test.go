package agenttool_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// laggingMailbox is a destination whose index shows a delivered message
// only five minutes after it arrived (the README's "mailbox index is still
// catching up"), on the test's clock.
type laggingMailbox struct {
	mu        sync.Mutex
	clk       *clock
	delivered []time.Time // arrival times, one per effect
}

func (b *laggingMailbox) deliver() {
	b.mu.Lock()
	b.delivered = append(b.delivered, b.clk.Now())
	b.mu.Unlock()
}

func (b *laggingMailbox) visible() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, at := range b.delivered {
		if b.clk.Now().Sub(at) >= 5*time.Minute {
			return true
		}
	}
	return false
}

func (b *laggingMailbox) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.delivered)
}

// The reconciler of reconcile_test.go: "not found, and sent more than five
// minutes ago" is a NotApplied, as reconcile.Request.LastSent documents.
func patientReconciler(clk *clock, box *laggingMailbox) reconcile.Reconciler {
	return reconcile.RequestFunc(func(_ context.Context, req reconcile.Request) reconcile.Answer {
		if box.visible() {
			return reconcile.AppliedWith([]byte(`{"ok":true}`))
		}
		if !req.LastSent.IsZero() && clk.Now().Sub(req.LastSent) > 5*time.Minute {
			return reconcile.NotAppliedYet()
		}
		return reconcile.StillPending()
	})
}

// An attempt that takes ten minutes (a slow upload) sends its request at
// its end, not its start. LastSent is the attempt's start, so the reconciler
// is told the request went out ten minutes ago, answers "not applied", and
// the same email is sent a second time.
func TestReview4_LastSentIsTheAttemptsStartNotItsEnd(t *testing.T) {
	clk := newClock()
	box := &laggingMailbox{clk: clk}
	var mu sync.Mutex
	runs := 0
	send := func(ctx context.Context, in emailInput) (sent, error) {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		if n == 1 {
			clk.Advance(10 * time.Minute) // the upload is slow
			box.deliver()                 // the request arrives at the end
			return sent{}, errLostReply   // and the reply is lost
		}
		box.deliver()
		return sent{MessageID: "<x@mail.test>"}, nil
	}
	tool, err := agenttool.New("send_email", "Send an email.", send, agenttool.Options{
		Store: memstore.New(), Class: agenttool.Reconcilable, Now: clk.Now,
		Reconciler: patientReconciler(clk, box),
		Retry:      agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), emailToAna)
	if box.count() != 1 {
		t.Fatalf("one logical action, %d emails delivered; envelope %s", box.count(), env)
	}
	if env.Status != envelope.UnknownOutcome {
		t.Errorf("envelope %s", env)
	}
}

// The same, across processes: the unknown record keeps the attempt's start
// as its LeaseExpiry, and the call that meets it tells the reconciler so.
func TestReview4_StoredLastSentIsTheAttemptsStart(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) { storedLastSent(t, open()) })
}

func storedLastSent(t *testing.T, store agenttool.Store) {
	clk := newClock()
	box := &laggingMailbox{clk: clk}
	var mu sync.Mutex
	runs := 0
	send := func(ctx context.Context, in emailInput) (sent, error) {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		if n == 1 {
			clk.Advance(10 * time.Minute)
			box.deliver()
			return sent{}, errLostReply
		}
		box.deliver()
		return sent{MessageID: "<x@mail.test>"}, nil
	}
	var down sync.Mutex
	mailboxDown := true // the mailbox's search API is down at first
	patient := patientReconciler(clk, box)
	check := reconcile.RequestFunc(func(ctx context.Context, req reconcile.Request) reconcile.Answer {
		down.Lock()
		d := mailboxDown
		down.Unlock()
		if d {
			return reconcile.CantSayBecause(errLostReply)
		}
		return patient.Check(ctx, req)
	})
	opts := agenttool.Options{Store: store, Class: agenttool.Reconcilable, Now: clk.Now, Reconciler: check,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
	tool, err := agenttool.New("send_email", "Send an email.", send, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, tool.Invoke(scoped(), emailToAna), envelope.UnknownOutcome)
	// One minute after the request arrived (eleven after the attempt began),
	// the search API is back and the model repeats itself.
	clk.Advance(time.Minute)
	down.Lock()
	mailboxDown = false
	down.Unlock()
	env := tool.Invoke(scoped(), emailToAna)
	if box.count() != 1 {
		t.Fatalf("one logical action, %d emails delivered; envelope %s", box.count(), env)
	}
}
