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

const review14Reworded2 = `{"to":"ana@example.com","subject":"Friday lunch?","body":"Ana, are you free for lunch at noon on Friday?"}`

// Turn 1: the Ana email (A) is not delivered, its reply lost: unknown.
// Turn 2: the model sends two reworded copies, D and C. D's fence finds A
// not applied (proven) and D goes on in A's place; D is delivered. C's
// fence listed A while D held it and reads it again just after D's
// deferred settlement approved it (a slow store round trip): settleEarlier's
// "just approved" case. C is told: "An earlier send_email in this
// conversation (A) was found not done, and may be tried again; nothing new
// was done. Tell the user it is pending, and wait before calling
// send_email again." next: wait, earlier {A, failed}. Nothing says that D
// was just done in A's place, although the notice saying so was put
// before A was approved (C checked the notices before its fence, and not
// after a fence that blocks).
//
// The literal model waits and calls C again: after NoticeHold, C runs, and
// Ana gets two emails for one request (D and C).
func TestReview14_JustApprovedToldOfTheReplacementThatWasDone(t *testing.T) {
	const hold = 200 * time.Millisecond
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := &pauseList{Store: open(), listed: make(chan struct{}), release: make(chan struct{})}
		g := newGatedMail(2) // run 2 (D) is slow
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: ans,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, NoticeHold: hold})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		ans.set(reconcile.NotAppliedFenced())

		var d, c envelope.Envelope
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); d = tool.Invoke(scoped(), review11Reworded) }()
		<-g.started // D holds A in its place and is sending

		store.armed.Store(true)
		wg.Add(1)
		go func() { defer wg.Done(); c = tool.Invoke(scoped(), review14Reworded2) }()
		<-store.listed // C's fence has listed A (held by D)

		close(g.gate) // D is delivered; A is approved after D's success is announced
		for i := 0; i < 500; i++ {
			if rec, err := store.Get(context.Background(), first.RequestRef); err == nil && rec.State == agenttool.Unknown && rec.RetryApproved {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		close(store.release)
		wg.Wait()
		t.Logf("D: %s", d)
		t.Logf("C: %s", c)
		mustStatus(t, d, envelope.Success)
		if err := c.Validate(); err != nil {
			t.Errorf("invalid: %v", err)
		}
		if c.Earlier != nil && c.Earlier.RequestRef == first.RequestRef && strings.Contains(c.Note, "was found not done, and may be tried again") {
			t.Errorf("C was told that the Ana email %s was not done and may be tried again; the same turn, %s was just done in its place (%d emails): "+
				"the notice that says so was not consulted", first.RequestRef, d.RequestRef, g.count())
		}
		// The literal model: next=wait → wait, call again.
		for i, e := range literal(t, scoped(), tool, review14Reworded2, c, hold+100*time.Millisecond, 3)[1:] {
			t.Logf("C after waiting, call %d: %s", i+1, e)
		}
		if n := g.count(); n != 1 {
			t.Errorf("one email to Ana was asked for (reworded twice); following next=wait sent %d (%v)", n, g.effects)
		}
	})
}
