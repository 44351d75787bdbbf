package agenttool_test

import (
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// A's attempt returns an unknown outcome (delivered, reply lost), and A's
// own call asks the mailbox, which is slow. A's record is pending with a
// live lease and not marked TakenOver, so the unknown fence does not count
// it, although A's action may already have applied and is being checked —
// exactly what TakenOver marks when a sweeper or a later call checks it.
// A reworded resend in the same session (the user's UI timed out and the
// turn is regenerated) runs. A is then found delivered: two emails.
func TestReview4_TheFenceMissesACallCheckingItsOwnUnknownAttempt(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply // A: delivered, reply lost
			}
			return true, nil
		}}
		g := &gate{}
		g.set(reconcile.AppliedWith([]byte(`{"message_id":"<a@mail.test>"}`)), true)
		tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.Reconcilable, Reconciler: g})
		first := make(chan envelope.Envelope)
		go func() { first <- tool.Invoke(scoped(), lunch) }()
		<-g.entered // A's attempt came back unknown; A's call is asking the mailbox

		b := tool.Invoke(scoped(), lunchReworded)
		close(g.open)
		a := <-first
		t.Logf("A: %s", a)
		t.Logf("B: %s", b)
		if m.count() > 1 {
			t.Fatalf("%d emails: B ran while A's outcome was unknown and being checked (B: %s)", m.count(), b.Status)
		}
	})
}
