package agenttool_test

import (
	"context"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// mailbox is a truthful reconciler over a mailServer: delivered refs are
// Pending until indexed (never, here); undelivered refs are Pending while
// unsure (the request might still land), NotApplied afterwards.
type mailbox struct {
	mu     sync.Mutex
	m      *mailServer
	unsure bool
}

func (b *mailbox) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	ref := req.Ref
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m.mu.Lock()
	delivered := false
	for _, e := range b.m.effects {
		delivered = delivered || e == ref
	}
	b.m.mu.Unlock()
	if delivered || b.unsure {
		return reconcile.StillPending() // the mailbox index is catching up
	}
	return reconcile.NotAppliedYet() // truthful: A never arrived
}

// Regression (I9, reconcilable): A is unknown; the fence settles A as not
// applied and lets B (A reworded) run; B ends unknown. A sent again then
// runs although B is unknown in the same session: hold() runs the fence
// only for claims with Attempts == 0, and a RetryApproved record is
// claimed with its old attempt count.
func TestI9_ARetryApprovedActionWaitsForTheFence(t *testing.T) {
	m := &mailServer{script: func(n int) (bool, error) {
		switch n {
		case 1:
			return false, errLostReply // A: never delivered, reply lost
		case 2:
			return true, errLostReply // B: delivered, reply lost
		}
		return true, nil
	}}
	rec := &mailbox{m: m, unsure: true}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: rec,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}})

	a := tool.Invoke(scoped(), lunch)
	mustStatus(t, a, envelope.UnknownOutcome)
	rec.mu.Lock()
	rec.unsure = false // later the destination can prove A never landed
	rec.mu.Unlock()

	b := tool.Invoke(scoped(), lunchReworded) // fence: A not applied (RetryApproved); B runs, delivered, unknown
	mustStatus(t, b, envelope.UnknownOutcome)
	a2 := tool.Invoke(scoped(), lunch) // the model resends the original while B is unknown
	t.Logf("A again: %s", a2)
	if m.count() > 1 {
		t.Fatalf("%d emails delivered for one logical action (A re-ran while B was unknown): %v", m.count(), m.effects)
	}
}
