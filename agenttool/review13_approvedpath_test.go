package agenttool_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// pauseList is a store whose next fence listing (armed) returns its
// records and then waits on release before the caller goes on: a fence
// whose listing is read a moment before another call settles what it
// listed (a slow network to the store, a GC pause, a busy scheduler).
type pauseList struct {
	agenttool.Store
	armed   atomic.Bool
	listed  chan struct{}
	release chan struct{}
}

func (p *pauseList) ListUnknown(ctx context.Context, r storekit.ListRequest) ([]agenttool.Record, error) {
	recs, err := p.Store.ListUnknown(ctx, r)
	if r.Held && p.armed.CompareAndSwap(true, false) {
		close(p.listed)
		<-p.release
	}
	return recs, err
}

// review13Mail is a mail server scripted by recipient and subject:
//   - the first Ana "Lunch" email: not delivered, reply lost (unknown);
//   - Bob's email: waits on bobGate, then 550 (definite, not delivered);
//   - the reworded Ana email: signals rewordStarted, waits on rewordGate,
//     delivers;
//   - anything else: delivers.
type review13Mail struct {
	mu            sync.Mutex
	delivered     []string // "to|subject"
	firstLunch    atomic.Bool
	bobGate       chan struct{}
	bobStarted    chan struct{}
	rewordGate    chan struct{}
	rewordStarted chan struct{}
}

func (m *review13Mail) send(ctx context.Context, in emailInput) (sent, error) {
	ref := agenttool.RequestRef(ctx)
	switch {
	case in.To == "ana@example.com" && in.Subject == "Lunch" && m.firstLunch.CompareAndSwap(false, true):
		return sent{}, errLostReply
	case in.To == "bob@example.com":
		close(m.bobStarted)
		<-m.bobGate
		return sent{}, envelope.MarkDefinite(errors.New("550 5.1.1 <bob@example.com>: mailbox unavailable"), "mailbox_unavailable")
	case strings.HasPrefix(in.Subject, "Lunch on Friday"):
		close(m.rewordStarted)
		<-m.rewordGate
	}
	m.mu.Lock()
	m.delivered = append(m.delivered, in.To+"|"+in.Subject)
	m.mu.Unlock()
	return sent{MessageID: "<" + ref + "@mail.test>"}, nil
}

func (m *review13Mail) toAna() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, d := range m.delivered {
		if strings.HasPrefix(d, "ana@") {
			out = append(out, d)
		}
	}
	return out
}

const review13Bob = `{"to":"bob@example.com","subject":"Report","body":"Here is the report."}`

// One turn after "email Ana about lunch" came back unknown: the model
// sends, in parallel, an email to Bob (another action), a reworded copy of
// the Ana email, and the identical Ana resend. The Bob call's fence finds
// the Ana email not applied and holds it in place of itself; Bob's
// mailbox refuses the email (definite failure, nothing sent), so the Bob
// call ends normally and approves the Ana email for a retry. The reworded
// Ana call had listed the Ana email a moment before that approval; its
// fence then meets the record approved (settleEarlier: ErrNotUnknown,
// Unknown && RetryApproved), sets replaces and goes on — without holding
// the Ana email and without marking itself for the fence. The identical
// resend, waiting on the held Ana record, claims the approval as soon as
// it is written; its claim is not fenced (the reworded call's pending
// record is not TakenOver) and no notice exists (Bob failed), so it sends
// the original Ana email while the reworded one is being sent. A fence
// that meets an earlier action just approved now holds the call back.
//
// Without the Bob call in front, the same turn (reword + resend, at once)
// sends exactly one Ana email (TestReview11_*): the README promises it
// "in either order or at once".
func TestReview13_ApprovedByAFailedReplacementSendsOneToAna(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := &pauseList{Store: open(), listed: make(chan struct{}), release: make(chan struct{})}
		m := &review13Mail{bobGate: make(chan struct{}), bobStarted: make(chan struct{}),
			rewordGate: make(chan struct{}), rewordStarted: make(chan struct{})}
		ans := &answers{answer: reconcile.StillPending()}
		tool, err := agenttool.New("send_email", "Send an email.", m.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
			Reconciler: ans, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		ans.set(reconcile.NotAppliedFenced()) // the mail server proves the first Ana email never arrived

		// The turn: Bob, the reworded Ana email, and the Ana resend.
		var bob, reworded, resend envelope.Envelope
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); bob = tool.Invoke(scoped(), review13Bob) }()
		<-m.bobStarted // Bob's call holds the Ana email in its place, and is sending

		store.armed.Store(true)
		wg.Add(1)
		go func() { defer wg.Done(); reworded = tool.Invoke(scoped(), review11Reworded) }()
		<-store.listed // the reworded call's fence has read its listing

		close(m.bobGate) // Bob's mailbox refuses: definite failure
		for i := 0; i < 500; i++ {
			if rec, err := store.Get(context.Background(), first.RequestRef); err == nil && rec.State == agenttool.Unknown && rec.RetryApproved {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		close(store.release) // the reworded call's fence goes on
		select {
		case <-m.rewordStarted:
		case <-time.After(200 * time.Millisecond):
			t.Log("the reworded email did not start (held back)")
		}
		// The identical resend of the same turn.
		resend = tool.Invoke(scoped(), lunch)
		close(m.rewordGate)
		wg.Wait()
		t.Logf("bob:      %s", bob)
		t.Logf("reworded: %s", reworded)
		t.Logf("resend:   %s", resend)
		if got := m.toAna(); len(got) != 1 {
			t.Errorf("one logical action (email Ana about lunch), reworded and resent in one turn: %d emails to Ana %v; want 1", len(got), got)
		}
	})
}
