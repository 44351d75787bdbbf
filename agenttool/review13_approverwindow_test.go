package agenttool_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
)

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
func TestReview13_ApproverWindowBetweenApprovalAndClaim(t *testing.T) {
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
		reworded := tool.Invoke(scoped(), review11Reworded)
		close(store.release)
		wg.Wait()
		t.Logf("resend:   %s", resend)
		t.Logf("reworded: %s", reworded)
		if n := m.count(); n != 1 {
			t.Errorf("one logical action, resent and reworded in one turn, sent %d emails (%v); want 1", n, m.effects)
		}
	})
}
