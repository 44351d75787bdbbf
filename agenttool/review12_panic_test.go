package agenttool_test

import (
	"context"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// invokeRecovering runs one call as an application handler does (net/http
// recovers a handler's panic and serves the next request).
func invokeRecovering(tool *agenttool.Tool, in string) (env envelope.Envelope, panicked any) {
	defer func() { panicked = recover() }()
	return tool.Invoke(scoped(), in), nil
}

// The reworded call goes on in place of the unknown email, found not
// applied by its fence; the earlier email is held (deferred) until the
// call ends. The reworded email is delivered, and then the tool panics
// (a bug parsing the SMTP server's reply). agenttool does not recover a
// tool's panic; the application's handler does, and serves the next
// request. The deferred settleDeferred still runs while the panic unwinds
// and approves the earlier email for one more attempt, while the reworded
// call's own record is left pending (not marked for the fence, lease live):
// the identical resend then used the approval and sent the original too.
// A crash at the same point leaves both records held and then unknown (the
// resend is fenced); a panic should not be less safe than a crash. Now the
// replacing call is marked for the fence while it runs, and a call that
// did not end normally gives the earlier action back unknown.
func TestReview12_PanicInReplacingCallLeavesEarlierFenced(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := firstLost()
		send := func(ctx context.Context, in emailInput) (sent, error) {
			out, err := m.send(ctx, in)
			if m.runs.Load() == 2 {
				panic("smtp: malformed 250 reply") // after the reworded email went out
			}
			return out, err
		}
		ans := &answers{answer: reconcile.StillPending()}
		tool, err := agenttool.New("send_email", "Send an email.", send, agenttool.Options{Store: open(),
			Class: agenttool.Reconcilable, Reconciler: ans, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		ans.set(reconcile.NotAppliedFenced()) // the first email never arrived, provably

		// The next turn: a reworded copy (its tool panics after sending),
		// then the identical resend.
		_, p := invokeRecovering(tool, review11Reworded)
		if p == nil {
			t.Fatal("the tool did not panic")
		}
		t.Logf("reworded call panicked: %v (emails so far: %v)", p, m.effects)
		resend, p2 := invokeRecovering(tool, lunch)
		t.Logf("resend: %s (panic %v)", resend, p2)
		if n := m.count(); n != 1 {
			t.Errorf("one logical action (email Ana about lunch) in one turn left %d emails (%v); resend said %s", n, m.effects, resend.Status)
		}
	})
}
