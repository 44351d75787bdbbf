package agenttool_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

const review11Reworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you?"}`

// gatedMail is a mail server whose n-th run (gateRun) waits on gate before
// it delivers, and signals started when it begins: a slow SMTP server.
// Run 1 is not delivered and its reply is lost (unknown); every other run
// delivers.
type gatedMail struct {
	*mailServer
	gateRun int
	gate    chan struct{}
	started chan struct{}
}

func newGatedMail(gateRun int) *gatedMail {
	g := &gatedMail{gateRun: gateRun, gate: make(chan struct{}), started: make(chan struct{})}
	g.mailServer = &mailServer{script: func(n int) (bool, error) {
		if n == 1 {
			return false, errLostReply
		}
		if n == g.gateRun {
			close(g.started)
			select {
			case <-g.gate:
			case <-time.After(5 * time.Second):
			}
		}
		return true, nil
	}}
	return g
}

// The same turn as TestReview10_RewordThenResendAfterNotApplied
// (reworded-first), but the two tool calls run concurrently (parallel
// tool_calls executed by goroutines, as the README's "sequential or truly
// concurrent" promise covers). The reworded call's fence finds the unknown
// email not applied, approves it for a retry, and goes on to send the
// reworded email (replaces). While its SMTP send is still running, the
// identical resend claims the approved record: the reworded call's record
// was pending and not marked for the fence, and no notice existed yet (it
// is put at finish), so the resend sent the original email too. The
// earlier email is now held by the reworded call until it ends, and only
// then approved: the resend waits (in_progress), and after that is told
// what was done instead.
func TestReview11_RewordedInPlaceRunsConcurrentlyWithApprovedResend(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		{
			store := open()
			g := newGatedMail(2) // run 2 is the reworded email: slow
			ans := &answers{answer: reconcile.StillPending()}
			tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: ans,
				Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 50 * time.Millisecond})
			first := tool.Invoke(scoped(), lunch)
			mustStatus(t, first, envelope.UnknownOutcome)
			ans.set(reconcile.NotAppliedFenced()) // the destination proves it never got the first email

			// The next turn: the reworded copy and the identical resend, in parallel.
			var reworded envelope.Envelope
			done := make(chan struct{})
			go func() {
				defer close(done)
				reworded = tool.Invoke(scoped(), review11Reworded)
			}()
			select {
			case <-g.started:
			case <-time.After(5 * time.Second):
				t.Fatal("the reworded email never started")
			}
			resend := tool.Invoke(scoped(), lunch)
			close(g.gate)
			<-done
			t.Logf("reworded: %s", reworded)
			t.Logf("resend:   %s", resend)
			if n := g.count(); n != 1 {
				t.Errorf("one logical action (email Ana about lunch) in one turn of two parallel calls left %d emails (%v)", n, g.effects)
			}
			if resend.Status == envelope.Success {
				t.Errorf("the resend while the reworded email is sent: %s; want it held", resend)
			}
			again := tool.Invoke(scoped(), lunch)
			if again.Error == nil || again.Error.Code != envelope.CodeEarlierApplied || again.Earlier.RequestRef != reworded.RequestRef {
				t.Errorf("the resend after the reworded email: %s; want earlier_action_applied naming it", again)
			}
		}
	})
}

// The reworded-first turn again, one call after the other, but the unknown
// email was found not applied before the turn by the sweeper (or an
// operator's ResolveNotApplied, or `opcmd resolve not-applied`), not by the
// reworded call's own fence. The reworded call then meets no unknown record
// (an approved record does not fence) and no notice (a not-applied
// settlement puts none), runs, and announces nothing (it replaced nothing
// in its own eyes); the identical resend then consumes the approval and
// sends the original too. Resend first, the same turn sends one email
// (the approved retry announces its success).
//
// Known gap, documented in the package's caveats: a retry approved before
// the turn does not fence the scope (the stores index open records only),
// so the reworded copy sent first in the turn is a new action.
func TestReview11_RewordThenResendAfterSettledNotAppliedElsewhere(t *testing.T) {
	t.Skip("known gap: an approved retry does not fence the scope; see agenttool's caveats")
	type setup struct {
		name   string
		opts   func(store agenttool.Store, ans *answers) agenttool.Options
		settle func(t *testing.T, op *agenttool.Operator, first envelope.Envelope)
	}
	sweep := func(t *testing.T, op *agenttool.Operator, first envelope.Envelope) {
		rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
		if err != nil || rep.NotApplied != 1 {
			t.Fatalf("sweep: %+v %v", rep, err)
		}
	}
	resolve := func(t *testing.T, op *agenttool.Operator, first envelope.Envelope) {
		if err := op.ResolveNotApplied(context.Background(), first.RequestRef, first.Attempts, "maria", "not in the mail log"); err != nil {
			t.Fatal(err)
		}
	}
	setups := []setup{
		{"reconcilable/sweeper", func(s agenttool.Store, a *answers) agenttool.Options {
			return agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: a, Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
		}, sweep},
		{"reconcilable/operator", func(s agenttool.Store, a *answers) agenttool.Options {
			return agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: a, Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
		}, resolve},
		{"atmostonce/operator", func(s agenttool.Store, a *answers) agenttool.Options {
			return agenttool.Options{Store: s, Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
		}, resolve},
		{"atmostonce/opcmd-approve-retry-once", func(s agenttool.Store, a *answers) agenttool.Options {
			return agenttool.Options{Store: s, Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
		}, func(t *testing.T, op *agenttool.Operator, first envelope.Envelope) {
			var out, errOut strings.Builder
			args := []string{"approve", first.RequestRef, "-retry-once", "-attempts", "1", "-by", "maria", "-why", "ticket 7"}
			if code := opcmd.Run(context.Background(), op, args, &out, &errOut, nil); code != 0 {
				t.Fatalf("opcmd approve: exit %d: %s %s", code, out.String(), errOut.String())
			}
			t.Logf("opcmd: %s", strings.TrimSpace(out.String()))
		}},
		{"keyed/operator", func(s agenttool.Store, a *answers) agenttool.Options {
			return agenttool.Options{Store: s, Class: agenttool.Keyed, Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
		}, resolve},
	}
	for _, su := range setups {
		for _, order := range []string{"resend-first", "reworded-first"} {
			t.Run(su.name+"/"+order, func(t *testing.T) {
				m := firstLost()
				m.dedupe = true // a keyed destination dedupes by request reference; harmless for the others
				store := memstore.New()
				ans := &answers{answer: reconcile.StillPending()}
				tool := newEmailTool(t, m, su.opts(store, ans))
				op, err := agenttool.NewOperator(store, tool)
				if err != nil {
					t.Fatal(err)
				}
				first := tool.Invoke(scoped(), lunch)
				mustStatus(t, first, envelope.UnknownOutcome)
				ans.set(reconcile.NotAppliedFenced())
				su.settle(t, op, first)

				calls := []string{lunch, review11Reworded}
				if order == "reworded-first" {
					calls = []string{review11Reworded, lunch}
				}
				for i, in := range calls {
					e := tool.Invoke(scoped(), in)
					t.Logf("call %d: %s", i+1, e)
				}
				if n := m.count(); n != 1 {
					t.Errorf("one logical action (email Ana about lunch) left %d emails after one turn of [%s] (%v)", n, order, m.effects)
				}
			})
		}
	}
}

// An approver's RetryOnce: the resend's call writes the approval and claims
// the record afresh. Its record was first pending and unmarked until the
// call marked it for the fence (one store round trip later), and a
// reworded copy of the same turn, running in parallel, that claimed inside
// that round trip ran too. The claim of an approved retry now marks the
// record itself: a reworded copy that runs while the approved retry's
// attempt is in flight is held back.
func TestReview11_ApprovedRetryFencesFromItsClaim(t *testing.T) {
	inRetry, release := make(chan struct{}), make(chan struct{})
	m := &mailServer{script: func(n int) (bool, error) {
		switch n {
		case 1:
			return false, errLostReply // not delivered; the reply is lost
		case 2:
			close(inRetry) // the approved retry's attempt is in flight
			<-release
		}
		return true, nil
	}}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
		Approver: &ticket{attempts: 1}, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)

	var resend envelope.Envelope
	done := make(chan struct{})
	go func() {
		defer close(done)
		resend = tool.Invoke(scoped(), lunch) // approved: one more attempt
	}()
	<-inRetry
	reworded := tool.Invoke(scoped(), review11Reworded)
	close(release)
	<-done
	mustStatus(t, resend, envelope.Success)
	if reworded.Status != envelope.UnknownOutcome || reworded.Error.Code != envelope.CodeEarlierUnknown || reworded.Earlier.RequestRef != first.RequestRef {
		t.Errorf("the reworded copy while the approved retry runs: %s; want earlier_action_unknown", reworded)
	}
	if n := m.count(); n != 1 {
		t.Errorf("one logical action left %d emails (%v)", n, m.effects)
	}
}

// The same parallel turn with no gate at all: every SMTP send takes 20ms,
// the reworded copy and the identical resend are started together, many
// rounds. Counts the rounds that sent two emails.
func TestReview11_ParallelTurnNoGate(t *testing.T) {
	const rounds = 30
	twice := 0
	for r := 0; r < rounds; r++ {
		m := firstLost()
		m.delay = 20 * time.Millisecond
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: ans,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		ans.set(reconcile.NotAppliedFenced())
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, in := range []string{review11Reworded, lunch} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tool.Invoke(scoped(), in)
			}()
		}
		close(start)
		wg.Wait()
		if m.count() > 1 {
			twice++
		}
	}
	if twice > 0 {
		t.Errorf("%d of %d parallel turns (reworded copy + identical resend, after a not-applied finding) sent two emails", twice, rounds)
	}
}
