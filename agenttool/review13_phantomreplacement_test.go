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

// byRef answers per request ref; an unlisted ref is pending. slow refs
// take their time before answering (a mailbox index that is catching up).
type byRef struct {
	mu   sync.Mutex
	ans  map[string]reconcile.Answer
	slow map[string]time.Duration
}

func (b *byRef) Check(ctx context.Context, req reconcile.Request) reconcile.Answer {
	b.mu.Lock()
	a, ok := b.ans[req.Ref]
	d := b.slow[req.Ref]
	b.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	if !ok {
		return reconcile.StillPending()
	}
	return a
}

// Two earlier emails are unknown (to Ana and to Bob). In the next turn the
// model sends a reworded Ana email (B) and the identical resend of the
// first of them (A1'). B's fence finds A1 not applied and holds it "in
// place of" B, then asks about A2, whose check is slow (within
// CheckTimeout, which is 30 s by default, longer than WaitTimeout's 10 s)
// and ends "pending": B is held back and never runs. A1' waited on A1
// meanwhile and gave up after WaitTimeout with: "this action was found
// not applied, and another send_email (B) is being done in its place",
// Earlier {B, running}, next do_not_retry ("do not call send_email again
// until it is done"). B was never done; A1 is then approved for a retry
// (not unknown) and nothing is being done for the Ana email. The model
// tells the user the Ana email is pending and will not send it. The resend
// is now told that B holds its action, checking it, and may be done in its
// place, and to ask before sending it again.
func TestReview13_ResendToldOfAReplacementThatNeverRuns(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) {
			if n <= 2 {
				return false, errLostReply // the two earlier emails: not delivered, replies lost
			}
			return true, nil
		}}
		rec := &byRef{ans: map[string]reconcile.Answer{}, slow: map[string]time.Duration{}}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: rec,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 100 * time.Millisecond, CheckTimeout: 2 * time.Second})
		ana := lunch
		bob := `{"to":"bob@example.com","subject":"Report","body":"Here is the report."}`
		e1 := tool.Invoke(scoped(), ana)
		mustStatus(t, e1, envelope.UnknownOutcome)
		// The second earlier email (to Bob) is made unknown too; a tool of
		// the same name without the fence sends it (as a process that died
		// mid-send would leave it): the fenced tool would hold it back.
		rec.mu.Lock()
		rec.ans[e1.RequestRef] = reconcile.StillPending()
		rec.mu.Unlock()
		off := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: rec,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, Fence: agenttool.FenceOff})
		e2 := off.Invoke(scoped(), bob)
		mustStatus(t, e2, envelope.UnknownOutcome)
		a1, a2, resendIn := e1.RequestRef, e2.RequestRef, ana
		if a2 < a1 {
			a1, a2, resendIn = a2, a1, bob
		}
		rec.mu.Lock()
		rec.ans[a1] = reconcile.NotAppliedFenced() // found not applied at once
		rec.ans[a2] = reconcile.StillPending()     // still catching up...
		rec.slow[a2] = 400 * time.Millisecond      // ...and slow to say so
		rec.mu.Unlock()

		var b envelope.Envelope
		done := make(chan struct{})
		go func() { defer close(done); b = tool.Invoke(scoped(), review11Reworded) }()
		time.Sleep(50 * time.Millisecond) // B holds A1 and is asking about A2
		resend := tool.Invoke(scoped(), resendIn)
		<-done
		t.Logf("B (reworded): %s", b)
		t.Logf("resend of %s: %s", a1, resend)
		if b.Status == envelope.Success {
			t.Skip("B ran")
		}
		// What the resend may be told while B holds its action: that B may
		// be done in its place (it may also be held back, as here), and to
		// ask before sending it again — never that B is being done, nor to
		// wait and call again.
		if resend.Next != envelope.AskHuman || !strings.Contains(resend.Note, "may be done in its place") {
			got, _ := store.Get(context.Background(), a1)
			t.Errorf("the resend was told %q is being done in its place (earlier state %s, next %s), but that call was never run (%s); "+
				"the resend's action is now %v approved=%v, and nothing is being done for it; emails sent: %d",
				b.RequestRef, resend.Earlier.State, resend.Next, b.Error.Code, got.State, got.RetryApproved, m.count())
		}
	})
}
