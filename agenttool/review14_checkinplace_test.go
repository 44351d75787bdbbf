package agenttool_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// slowAnswer is a reconciler that, once armed, takes its time (a mailbox
// search polled with reconcile.Poll while the index catches up) and then
// answers what the test set.
type slowAnswer struct {
	mu     sync.Mutex
	answer reconcile.Answer
	delay  time.Duration
	asking chan struct{} // closed when the first slow check starts
	once   sync.Once
}

func (s *slowAnswer) set(a reconcile.Answer, d time.Duration) {
	s.mu.Lock()
	s.answer, s.delay = a, d
	s.mu.Unlock()
}

func (s *slowAnswer) Check(ctx context.Context, _ reconcile.Request) reconcile.Answer {
	s.mu.Lock()
	a, d := s.answer, s.delay
	s.mu.Unlock()
	if d > 0 {
		s.once.Do(func() { close(s.asking) })
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	return a
}

// The first Ana email was delivered, and its reply lost: unknown. The next
// turn, the model sends a reworded copy (B) and the identical resend (A')
// at once. B's fence takes A over "in place of B" and asks the destination
// about it; the mailbox search is slow (longer than WaitTimeout). A'
// waits on A, gives up, and is answered by the in-place-of variant of
// inProgress: "this action was found not applied ... This was not done",
// earlier {A, failed}. Nothing was found yet: the check is still running.
// It then finds A applied (B is held back with earlier_action_applied), or
// still pending. Either way A' told the model that the email which went
// out "was not done".
func TestReview14_ResendWhileTheFenceIsStillAskingIsToldItIsChecked(t *testing.T) {
	for _, verdict := range []struct {
		name string
		ans  reconcile.Answer
	}{{"applied", reconcile.AppliedWith([]byte(`{"found":true}`))}, {"pending", reconcile.StillPending()}} {
		t.Run(verdict.name, func(t *testing.T) {
			storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
				store := open()
				// Run 1 delivers and loses the reply; others deliver.
				m := &mailServer{script: func(n int) (bool, error) {
					if n == 1 {
						return true, errLostReply
					}
					return true, nil
				}}
				rec := &slowAnswer{answer: reconcile.StillPending(), asking: make(chan struct{})}
				tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: rec,
					Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 100 * time.Millisecond, CheckTimeout: 5 * time.Second})
				first := tool.Invoke(scoped(), lunch)
				mustStatus(t, first, envelope.UnknownOutcome)
				if m.count() != 1 {
					t.Fatalf("the first email should have been delivered: %d", m.count())
				}

				rec.set(verdict.ans, 600*time.Millisecond)
				var b envelope.Envelope
				done := make(chan struct{})
				go func() { defer close(done); b = tool.Invoke(scoped(), review11Reworded) }()
				<-rec.asking // B's fence holds A and is asking about it
				resend := tool.Invoke(scoped(), lunch)
				<-done
				for _, e := range []envelope.Envelope{b, resend} {
					if err := e.Validate(); err != nil {
						t.Errorf("invalid envelope %s: %v", e, err)
					}
				}
				t.Logf("B (reworded): %s", b)
				t.Logf("A' (resend):  %s", resend)
				if resend.Earlier != nil && resend.Earlier.RequestRef == first.RequestRef && resend.Earlier.State == envelope.ActionFailed {
					t.Errorf("the resend of %s was told the action was not done (earlier.state %q, note %q), "+
						"but the email was delivered (%d in the mailbox) and the destination had not answered yet (it then said %s)",
						first.RequestRef, resend.Earlier.State, resend.Note, m.count(), verdict.ans.Verdict)
				}
				if strings.Contains(resend.Note, "This was not done") {
					t.Errorf("note says %q", resend.Note)
				}
				// The model follows "wait", then calls again.
				time.Sleep(50 * time.Millisecond)
				again := tool.Invoke(scoped(), lunch)
				t.Logf("A' again:     %s", again)
				if m.count() != 1 {
					t.Errorf("emails: %d", m.count())
				}
			})
		})
	}
}
