package agenttool_test

import (
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// The resend of the unknown email while a reworded call runs in its place
// (the earlier record held by the reworded call's fence) waits WaitTimeout
// and is answered in_progress: "another call for this action is still
// running ... Wait, then call again with the same input to get its
// outcome; it will not run twice." No call of that action runs, and none
// will: it was found not applied and another email is being sent instead.
// The model does as told, after the reworded email is done and after
// NoticeHold: the call runs the action (the approval the deferred
// settlement left) and a second email goes out. Nothing told the model
// that the email it was waiting for was replaced. The resend is now told
// that the action was found not applied and that another call (named) is
// being done in its place.
func TestReview12_ResendWhileReplacedIsToldOfTheReplacement(t *testing.T) {
	const hold = 200 * time.Millisecond
	g := newGatedMail(2)
	ans := &answers{answer: reconcile.StillPending()}
	store := memstore.New()
	tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: ans,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 50 * time.Millisecond, NoticeHold: hold})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	ans.set(reconcile.NotAppliedFenced())

	var reworded envelope.Envelope
	done := make(chan struct{})
	go func() {
		defer close(done)
		reworded = tool.Invoke(scoped(), review11Reworded)
	}()
	<-g.started
	resend := tool.Invoke(scoped(), lunch) // same turn, the reworded email still on the wire
	close(g.gate)
	<-done
	t.Logf("turn 1, reworded: %s", reworded)
	t.Logf("turn 1, resend:   %s", resend)
	// The resend was told "in progress: wait, then call again; it will not
	// run twice", and calling again after NoticeHold sent a second email.
	// It must be told to ask first, and that another call may be done in
	// its place.
	if resend.Status == envelope.Success || resend.Next != envelope.AskHuman || !strings.Contains(resend.Note, "may be done in its place") {
		t.Errorf("the resend while its action is held in place of another: %s; want ask_human, naming the other call", resend)
	}
	if n := g.count(); n != 1 {
		t.Errorf("%d emails (%v), want 1", n, g.effects)
	}
}
