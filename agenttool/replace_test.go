package agenttool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// While a call runs in place of an action found not applied, that action's
// resend is held, then told what was done instead.
//
// The same turn as TestReplace_ResendAfterTheReplacementIsHeld
// (reworded-first), but the two tool calls run concurrently (parallel
// tool_calls executed by goroutines). The reworded call's fence finds the
// unknown email not applied, and its claim closes that email as replaced
// in the same transaction; while the reworded email is being sent, the
// identical resend is told so, and after it, told what was done instead.
func TestReplace_ConcurrentResendIsHeldWhileTheReplacementRuns(t *testing.T) {
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
				reworded = tool.Invoke(scoped(), lunchRephrased)
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
			if again.Error == nil || again.Error.Code != envelope.CodeReplaced || again.Earlier.RequestRef != reworded.RequestRef ||
				again.Earlier.State != envelope.ActionSucceeded {
				t.Errorf("the resend after the reworded email: %s; want replaced, naming it, done", again)
			}
		}
	})
}

// A reworded copy and the identical resend started together after a not-
// applied finding send one email.
//
// The same parallel turn with no gate at all: every SMTP send takes 20ms,
// the reworded copy and the identical resend are started together, many
// rounds. Counts the rounds that sent two emails.
func TestReplace_ParallelTurnSendsOne(t *testing.T) {
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
		for _, in := range []string{lunchRephrased, lunch} {
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

// failReplaceStore fails the claim that replaces another action while
// fail is set; with ambiguous, the store applies it and only the
// acknowledgement is lost.
type failReplaceStore struct {
	agenttool.Store
	fail, ambiguous atomic.Bool
	fails           atomic.Int32
}

func (s *failReplaceStore) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if r.Replace != nil && s.fail.Load() {
		s.fails.Add(1)
		if s.ambiguous.Load() {
			s.Store.Claim(ctx, r)
		}
		return storekit.ClaimResult{}, errStoreDown
	}
	return s.Store.Claim(ctx, r)
}

// When the claim that goes on in place of an action found not applied
// fails, nothing is sent by it, and the replaced action is sent at most
// once: a refused claim gives the action back as found (approved for one
// more attempt), an applied one whose acknowledgement was lost leaves it
// replaced by a claim that never ran.
func TestReplace_FailedReplacementSendsAtMostOnce(t *testing.T) {
	for _, ambiguous := range []bool{false, true} {
		t.Run(map[bool]string{false: "refused", true: "ambiguous"}[ambiguous], func(t *testing.T) {
			m := firstLost()
			store := &failReplaceStore{Store: memstore.New()}
			store.ambiguous.Store(ambiguous)
			check := &answers{answer: reconcile.StillPending()}
			tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check,
				Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 20 * time.Millisecond})
			first := tool.Invoke(scoped(), lunch)
			mustStatus(t, first, envelope.UnknownOutcome)
			check.set(reconcile.NotAppliedFenced())
			store.fail.Store(true)
			reworded := tool.Invoke(scoped(), lunchRephrased)
			store.fail.Store(false)
			if store.fails.Load() == 0 {
				t.Fatal("the reworded call never claimed in place of the earlier action")
			}
			if reworded.Status != envelope.DefiniteFailure || reworded.Error.Code != envelope.CodeStoreUnavailable {
				t.Errorf("the reworded call whose claim failed: %s; want store_unavailable", reworded)
			}
			resend := tool.Invoke(scoped(), lunch)
			t.Logf("resend: %s", resend)
			if n := m.count(); n > 1 || (resend.Status == envelope.Success) != (n == 1) {
				t.Errorf("%d emails after the resend answered %s; want at most 1, and a success only for one", n, resend.Status)
			}
		})
	}
}

// renewFailsFor fails the lease renewals of one key while armed: the
// store's row for it is locked past the statement timeout, or the
// connection the renewal went out on drops, while the other keys' renewals
// go through.
type renewFailsFor struct {
	agenttool.Store
	mu  sync.Mutex
	key string
}

func (r *renewFailsFor) arm(key string) { r.mu.Lock(); r.key = key; r.mu.Unlock() }

func (r *renewFailsFor) Renew(ctx context.Context, req storekit.RenewRequest) error {
	r.mu.Lock()
	k := r.key
	r.mu.Unlock()
	if k != "" && req.Key == k {
		return errStoreDown
	}
	return r.Store.Renew(ctx, req)
}

// A replaced action whose hold lost its lease is still held against its
// resend: the replacement fences the scope while it runs.
//
// The reworded call goes on in place of the unknown email (found not
// applied), and the earlier email is held until the reworded call ends.
// The keeper of that hold cannot renew its lease; it cancels the hold's
// work context (which nothing in the reworded call watches) and the
// reworded call sends on. Once the held lease lapses, the identical
// resend took the earlier record over, found it not applied, met no
// fence (the reworded call's own record was pending, fresh, not marked) and
// no notice (the reworded call had not finished), and sent the original
// while the reworded email is being sent: two emails in one turn, the
// case TestReplace_ConcurrentResendIsHeldWhileTheReplacementRuns
// closed, reopened by one lost hold. The replacing call is now marked for
// the fence while it runs, so the resend finds it at work.
func TestReplace_HeldEarlierLosingItsLeaseStillHoldsTheResend(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		const lease = 300 * time.Millisecond
		g := newGatedMail(2) // run 2 is the reworded email: slow
		store := &renewFailsFor{Store: open()}
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: ans,
			Lease: lease, Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 50 * time.Millisecond})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		ans.set(reconcile.NotAppliedFenced())
		store.arm(first.RequestRef) // the held earlier record's renewals fail

		var reworded envelope.Envelope
		done := make(chan struct{})
		go func() {
			defer close(done)
			reworded = tool.Invoke(scoped(), lunchRephrased)
		}()
		select {
		case <-g.started:
		case <-time.After(5 * time.Second):
			t.Fatal("the reworded email never started")
		}
		// While the reworded email is being sent, the resend waits and is
		// answered in_progress...
		early := tool.Invoke(scoped(), lunch)
		t.Logf("resend while held:        %s", early)
		// ...until the hold's lease lapses.
		untilLeaseLapses(t, store, first.RequestRef, 0)
		resend := tool.Invoke(scoped(), lunch)
		t.Logf("resend after lease lapse: %s", resend)
		close(g.gate)
		<-done
		t.Logf("reworded:                 %s", reworded)
		if n := g.count(); n != 1 {
			t.Errorf("one logical action (email Ana about lunch) in one turn left %d emails (%v)", n, g.effects)
		}
	})
}

// A replacement that runs for several leases keeps the replaced action held
// against the sweeper and the resend.
//
// Control for TestReplace_HeldEarlierLosingItsLeaseStillHoldsTheResend:
// with the held record's keeper renewing, a reworded call that runs for
// several leases keeps the earlier email held against the sweeper and the
// resend, and exactly one email goes out (this holds up).
func TestReplace_HeldEarlierSurvivesALongReplacementAndTheSweeper(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		const lease = 150 * time.Millisecond
		g := newGatedMail(2)
		store := open()
		check := &byRef{ans: map[string]reconcile.Answer{}} // pending, but for the first email below
		tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check,
			Lease: lease, Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 30 * time.Millisecond})
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		check.mu.Lock()
		check.ans[first.RequestRef] = reconcile.NotAppliedFenced() // the first email never arrived, provably
		check.mu.Unlock()
		var reworded envelope.Envelope
		done := make(chan struct{})
		go func() { defer close(done); reworded = tool.Invoke(scoped(), lunchRephrased) }()
		<-g.started
		for i := 0; i < 4; i++ {
			// The reworded email takes another lease: what is tested is
			// that the keepers renew the holds through real time.
			time.Sleep(lease)
			rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
			e := tool.Invoke(scoped(), lunch)
			t.Logf("round %d: sweep %+v %v; resend %s %v", i, rep, err, e.Status, e.Error)
		}
		close(g.gate)
		<-done
		again := tool.Invoke(scoped(), lunch)
		t.Logf("after: %s", again)
		if n := g.count(); n != 1 {
			t.Errorf("%d emails (%v)", n, g.effects)
		}
		if again.Error == nil || again.Error.Code != envelope.CodeReplaced || again.Earlier.RequestRef != reworded.RequestRef {
			t.Errorf("resend after: %s; want replaced, naming %s", again, reworded.RequestRef)
		}
	})
}

// A resend of an action replaced by another is told to ask first, naming
// the call done in its place.
//
// The resend of the unknown email while a reworded call runs in its place
// is told that the email was found not done and that another call (named)
// went on in its place; calling again after the notice sends nothing.
func TestReplace_ResendIsToldOfTheReplacement(t *testing.T) {
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
		reworded = tool.Invoke(scoped(), lunchRephrased)
	}()
	<-g.started
	resend := tool.Invoke(scoped(), lunch) // same turn, the reworded email still on the wire
	close(g.gate)
	<-done
	t.Logf("turn 1, reworded: %s", reworded)
	t.Logf("turn 1, resend:   %s", resend)
	if resend.Status == envelope.Success || resend.Next != envelope.AskHuman || !strings.Contains(resend.Note, "went on in its place") ||
		resend.Earlier == nil || resend.Earlier.RequestRef != reworded.RequestRef {
		t.Errorf("the resend while another runs in its action's place: %s; want ask_human, naming the other call", resend)
	}
	time.Sleep(hold) // past the notice
	if later := tool.Invoke(scoped(), lunch); later.Status == envelope.Success {
		t.Errorf("the resend after the notice: %s; want it told of the replacement again", later)
	}
	if n := g.count(); n != 1 {
		t.Errorf("%d emails (%v), want 1", n, g.effects)
	}
}

// invokeRecovering runs one call as an application handler does (net/http
// recovers a handler's panic and serves the next request).
func invokeRecovering(tool *agenttool.Tool, in string) (env envelope.Envelope, panicked any) {
	defer func() { panicked = recover() }()
	return tool.Invoke(scoped(), in), nil
}

// A replacement whose tool panics leaves the replaced action fenced, as a
// crash would: the resend sends nothing.
//
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
func TestReplace_PanicInTheReplacementLeavesTheEarlierFenced(t *testing.T) {
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
		_, p := invokeRecovering(tool, lunchRephrased)
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

// turnMail is a mail server scripted by recipient and subject:
//   - the first Ana "Lunch" email: not delivered, reply lost (unknown);
//   - Bob's email: waits on bobGate, then 550 (definite, not delivered);
//   - the reworded Ana email: signals rewordStarted, waits on rewordGate,
//     delivers;
//   - anything else: delivers.
type turnMail struct {
	mu            sync.Mutex
	delivered     []string // "to|subject"
	firstLunch    atomic.Bool
	bobGate       chan struct{}
	bobStarted    chan struct{}
	rewordGate    chan struct{}
	rewordStarted chan struct{}
}

func (m *turnMail) send(ctx context.Context, in emailInput) (sent, error) {
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

func (m *turnMail) toAna() []string {
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

const bobReport = `{"to":"bob@example.com","subject":"Report","body":"Here is the report."}`

// bobReport2 is a new action, asked for after bobReport was held back.
const bobReport2 = `{"to":"bob@example.com","subject":"Report, as asked","body":"Here is the report you asked for."}`

// A replacement that fails leaves the turn's other copies of the replaced
// action one email.
//
// One turn after "email Ana about lunch" came back unknown: the model
// sends, in parallel, an email to Bob (another action), a reworded copy of
// the Ana email, and the identical Ana resend. Bob's call's fence finds the
// Ana email not applied and goes on in its place (a new write of the scope
// may be a copy of it in other words: the Ana email is closed as replaced);
// Bob's mailbox refuses (definite failure, nothing sent). The reworded Ana
// email waits for Bob's write, then runs; the identical resend is told the
// Ana email was replaced: Ana gets one email. (WaitTimeout leaves Bob's
// write time to end on a loaded machine; the resend, sent while the
// reworded email is held at its gate, waits it out.)
func TestReplace_ApprovedByAFailedReplacementSendsOne(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := &turnMail{bobGate: make(chan struct{}), bobStarted: make(chan struct{}),
			rewordGate: make(chan struct{}), rewordStarted: make(chan struct{})}
		ans := &answers{answer: reconcile.StillPending()}
		tool, err := agenttool.New("send_email", "Send an email.", m.send, agenttool.Options{WaitTimeout: 2 * time.Second, Store: open(), Class: agenttool.Reconcilable,
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
		go func() { defer wg.Done(); bob = tool.Invoke(scoped(), bobReport) }()
		<-m.bobStarted // Bob's call went on in the Ana email's place, and is sending

		wg.Add(1)
		rewordDone := make(chan struct{})
		go func() { defer wg.Done(); defer close(rewordDone); reworded = tool.Invoke(scoped(), lunchRephrased) }()
		close(m.bobGate) // Bob's mailbox refuses: definite failure
		select {         // the reworded email starts, or its call ends held back
		case <-m.rewordStarted:
		case <-rewordDone:
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
		if resend.Status == envelope.Success {
			t.Errorf("the resend of the replaced Ana email: %s; want it told of the replacement", resend)
		}
	})
}

// byRef answers per request ref; an unlisted ref is pending. slow refs
// take their time before answering (a mailbox index that is catching up).
type byRef struct {
	mu      sync.Mutex
	ans     map[string]reconcile.Answer
	slow    map[string]bool
	asking  chan struct{} // closed when a check of a slow ref begins
	release chan struct{} // a slow ref's check answers once it is closed
	once    sync.Once
}

func (b *byRef) Check(ctx context.Context, req reconcile.Request) reconcile.Answer {
	b.mu.Lock()
	a, ok := b.ans[req.Ref]
	slow := b.slow[req.Ref]
	b.mu.Unlock()
	if slow {
		b.once.Do(func() { close(b.asking) })
		select {
		case <-b.release:
		case <-ctx.Done():
		}
	}
	if !ok {
		return reconcile.StillPending()
	}
	return a
}

// A resend held back by another action being checked is told what holds
// it, never that something is done in its place.
//
// Two earlier emails are unknown: to Ana, by the fenced tool, which holds
// the session's slot; to Bob, by a tool of the same name without the fence
// (as a process of an older version would leave it). In the next turn the
// model sends a reworded Ana email (B) and the resend of Bob's email. B's
// fence asks about the Ana email, slowly; Bob's resend meets the session
// held by that check, waits, and is told the Ana email is being verified.
// The check ends pending: B is held back too. Nothing is sent.
func TestReplace_ResendAsksWhileTheReplacementIsHeldBack(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) {
			if n <= 2 {
				return false, errLostReply // the two earlier emails: not delivered, replies lost
			}
			return true, nil
		}}
		rec := &byRef{ans: map[string]reconcile.Answer{}, slow: map[string]bool{}, asking: make(chan struct{}), release: make(chan struct{})}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: rec,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 100 * time.Millisecond, CheckTimeout: 2 * time.Second})
		ana := tool.Invoke(scoped(), lunch)
		mustStatus(t, ana, envelope.UnknownOutcome)
		off := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: rec,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, Fence: agenttool.FenceOff})
		bob := off.Invoke(scoped(), bobReport)
		mustStatus(t, bob, envelope.UnknownOutcome)
		rec.mu.Lock()
		rec.ans[ana.RequestRef] = reconcile.StillPending() // still catching up...
		rec.slow[ana.RequestRef] = true                    // ...and slow to say so
		rec.ans[bob.RequestRef] = reconcile.NotAppliedFenced()
		rec.mu.Unlock()

		var b envelope.Envelope
		done := make(chan struct{})
		go func() { defer close(done); b = tool.Invoke(scoped(), lunchRephrased) }()
		<-rec.asking // B's fence holds the Ana email and is asking about it
		resend := tool.Invoke(scoped(), bobReport)
		close(rec.release) // the Ana email's check ends: still pending
		<-done
		t.Logf("B (reworded): %s", b)
		t.Logf("resend of Bob's email: %s", resend)
		if b.Status == envelope.Success || resend.Status == envelope.Success || m.count() != 0 {
			t.Errorf("B %s, resend %s, %d emails; want both held back while the Ana email is unknown, nothing sent", b.Status, resend.Status, m.count())
		}
		if resend.Status != envelope.UnknownOutcome || resend.Earlier == nil || resend.Earlier.RequestRef != ana.RequestRef ||
			strings.Contains(resend.Note, "in its place") {
			t.Errorf("the resend held back by the Ana email's check: %s; want unknown_outcome naming %s, and nothing said done in its place", resend, ana.RequestRef)
		}
	})
}

type mailTruth struct {
	m       *mailServer
	pending *atomic.Bool
}

func (r mailTruth) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	if r.pending != nil && r.pending.Load() {
		return reconcile.StillPending()
	}
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if slices.Contains(r.m.effects, req.Ref) {
		return reconcile.AppliedWith([]byte(`{"message_id":"<` + req.Ref + `@mail.test>"}`))
	}
	return reconcile.NotAppliedFenced()
}

// After a restart while a replacement was on the wire, the resend, the
// reworded call and the operator tell the truth, and one email goes out.
//
// The process dies while a reworded call (B) sends in place of the
// unknown email (A1), which it holds "in-place-of:B": the store on disk
// (boltstore) is what a restart finds. B's email was delivered. After the
// restart, the leases lapse; the identical resend of A1, the reworded
// call again, and the operator's listing must all tell the truth, and the
// resend must not send.
func TestReplace_RestartWhileHeldInPlaceSendsOne(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.db")
	store := openBolt(t, path)
	g := newGatedMail(2)
	var pending atomic.Bool
	pending.Store(true)
	var claimed atomic.Value // the last key a call of process 1 claimed
	tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: mailTruth{g.mailServer, &pending},
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, Lease: time.Second, AttemptTimeout: 100 * time.Millisecond, ClockSkew: -1,
		Hooks: agenttool.Hooks{Claimed: func(_ context.Context, e agenttool.ClaimedEvent) { claimed.Store(e.RequestRef) }}})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	pending.Store(false)
	bDone := make(chan struct{})
	go func() { defer close(bDone); tool.Invoke(scoped(), lunchRephrased) }()
	<-g.started
	// The disk as the crash leaves it: B's fence and claim are written
	// before its tool runs.
	bRef := claimed.Load().(string)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(dir, "crashed.db")
	if err := os.WriteFile(crashed, b, 0o600); err != nil {
		t.Fatal(err)
	}
	close(g.gate) // B's email goes out; its process is gone

	store2 := openBolt(t, crashed)
	tool2 := newEmailTool(t, g.mailServer, agenttool.Options{Store: store2, Class: agenttool.Reconcilable, Reconciler: mailTruth{g.mailServer, nil},
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, Lease: time.Second, AttemptTimeout: 100 * time.Millisecond, ClockSkew: -1,
		WaitTimeout: 50 * time.Millisecond})
	early := tool2.Invoke(scoped(), lunch)
	t.Logf("resend right after the restart: %s", early)
	if early.Status == envelope.Success {
		t.Errorf("resend right after the restart ran: %s", early)
	}
	op, err := agenttool.NewOperator(store2, tool2)
	if err != nil {
		t.Fatal(err)
	}
	// The leases the dead process left lapse, and with them the time its
	// requests may still be in flight.
	untilLeaseLapses(t, store2, first.RequestRef, 100*time.Millisecond)
	untilLeaseLapses(t, store2, bRef, 100*time.Millisecond)
	recs, err := op.Unknown(context.Background(), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		t.Logf("operator lists %s %v attempts=%d owner=%q", r.Key, r.State, r.Attempts, r.Owner)
	}
	resend := tool2.Invoke(scoped(), lunch)
	again := tool2.Invoke(scoped(), lunchRephrased)
	t.Logf("resend after the leases lapsed: %s", resend)
	t.Logf("reworded again:                 %s", again)
	<-bDone // B's email, sent by the process that died, has landed
	if n := g.count(); n != 1 {
		t.Errorf("emails to Ana: %d (%v); want 1", n, g.effects)
	}
	if resend.Status == envelope.Success && !resend.Replayed {
		t.Errorf("resend ran: %s", resend)
	}
}

// A resend is never told its action was not done while the fence is still
// asking the destination.
//
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
func TestReplace_ResendWhileTheFenceAsksIsNotToldNotDone(t *testing.T) {
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
				rec := &gate{answer: reconcile.StillPending()}
				tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: rec,
					Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 100 * time.Millisecond, CheckTimeout: 5 * time.Second})
				first := tool.Invoke(scoped(), lunch)
				mustStatus(t, first, envelope.UnknownOutcome)
				if m.count() != 1 {
					t.Fatalf("the first email should have been delivered: %d", m.count())
				}

				rec.set(verdict.ans, true) // the mailbox search is slow: it answers when the test opens the gate
				var b envelope.Envelope
				done := make(chan struct{})
				go func() { defer close(done); b = tool.Invoke(scoped(), lunchRephrased) }()
				<-rec.entered // B's fence holds A and is asking about it
				resend := tool.Invoke(scoped(), lunch)
				close(rec.open) // the search answers after the resend gave up waiting
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
				again := tool.Invoke(scoped(), lunch)
				t.Logf("A' again:     %s", again)
				if m.count() != 1 {
					t.Errorf("emails: %d", m.count())
				}
			})
		})
	}
}

const lunchRephrased2 = `{"to":"ana@example.com","subject":"Friday lunch?","body":"Ana, are you free for lunch at noon on Friday?"}`

// A call that meets a replacement just done is told of it, and a model
// following next sends nothing more.
//
// Turn 1: the Ana email (A) is not delivered, its reply lost: unknown.
// Turn 2: the model sends two reworded copies, D and C. D's fence finds A
// not applied (proven) and D goes on in A's place; D is slow to deliver.
// C waits for D's write, then is told that D was just done (its notice):
// earlier_action_applied, ask_human. The literal model stops there: one
// email.
func TestReplace_JustApprovedIsToldOfTheReplacement(t *testing.T) {
	const hold = 200 * time.Millisecond
	clk := &jumpClock{} // the model's waits skip ahead past NoticeHold
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		g := newGatedMail(2) // run 2 (D) is slow
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: open(), Class: agenttool.Reconcilable, Reconciler: ans,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, NoticeHold: hold, Now: clk.Now})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		ans.set(reconcile.NotAppliedFenced())

		var d, c envelope.Envelope
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); d = tool.Invoke(scoped(), lunchRephrased) }()
		<-g.started // D went on in A's place and is sending

		wg.Add(1)
		go func() { defer wg.Done(); c = tool.Invoke(scoped(), lunchRephrased2) }()
		close(g.gate) // D is delivered
		wg.Wait()
		t.Logf("D: %s", d)
		t.Logf("C: %s", c)
		mustStatus(t, d, envelope.Success)
		if err := c.Validate(); err != nil {
			t.Errorf("invalid: %v", err)
		}
		if c.Status == envelope.Success {
			t.Errorf("C ran beside D, which went on in the Ana email's place: %s", c)
		}
		// The literal model: next=wait → wait, call again.
		for i, e := range literal(t, scoped(), tool, lunchRephrased2, c, func() { clk.Advance(hold + 100*time.Millisecond) }, 3)[1:] {
			t.Logf("C after waiting, call %d: %s", i+1, e)
		}
		if n := g.count(); n != 1 {
			t.Errorf("one email to Ana was asked for (reworded twice); following next sent %d (%v)", n, g.effects)
		}
	})
}

// literal is a model that does what `next` says, turn after turn, for one
// input: wait → wait, then call again with the same input; ask_human → ask,
// and (here) the human says nothing new yet, so stop; anything else: stop.
// It returns every envelope it read.
func literal(t *testing.T, ctx context.Context, tool *agenttool.Tool, in string, first envelope.Envelope, pause func(), turns int) []envelope.Envelope {
	t.Helper()
	seen := []envelope.Envelope{first}
	env := first
	for i := 0; i < turns && env.Next == envelope.Wait; i++ {
		pause()
		env = tool.Invoke(ctx, in)
		if err := env.Validate(); err != nil {
			t.Errorf("invalid envelope %s: %v", env, err)
		}
		seen = append(seen, env)
	}
	return seen
}

// A model that follows next literally after a replacement sends one email.
//
// Turn 1: the Ana email is not delivered, its reply lost: unknown. Turn 2:
// the model sends a reworded copy (B) and the identical resend (A') at
// once; B's fence finds A not applied and goes on in its place; B's SMTP
// exchange is slower than WaitTimeout. A' is told (in-place-of variant of
// inProgress): "This was not done; another send_email (B) is to be done in
// its place ... Tell the user it is pending, and wait before calling
// send_email again." next: wait. B is delivered.
//
// The model does exactly that: it waits, then calls send_email again with
// the same input. If its wait is longer than NoticeHold, the call runs the
// approval B's deferred settlement left on A: Ana gets the email twice (B,
// then A). Nothing in A's envelope says that calling again will send it
// (the keyed "it will not run twice" promise is gone, but "wait before
// calling again" still invites the call). TestReplace_ResendIsToldOfTheReplacement
// checks what the resend is told while it waits.
func TestReplace_LiteralModelSendsOnce(t *testing.T) {
	const hold = 200 * time.Millisecond
	clk := &jumpClock{} // the model's waits skip ahead past NoticeHold
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		g := newGatedMail(2)
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: open(), Class: agenttool.Reconcilable, Reconciler: ans,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 50 * time.Millisecond, NoticeHold: hold, Now: clk.Now})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		ans.set(reconcile.NotAppliedFenced())

		var b envelope.Envelope
		done := make(chan struct{})
		go func() { defer close(done); b = tool.Invoke(scoped(), lunchRephrased) }()
		<-g.started
		resend := tool.Invoke(scoped(), lunch)
		close(g.gate)
		<-done
		t.Logf("B:  %s", b)
		t.Logf("A': %s", resend)
		if resend.Next != envelope.Wait {
			// Not told to wait: the literal model stops here, and the
			// resend must not have sent the email itself.
			t.Logf("A' was not told to wait: %s", resend)
			if resend.Status == envelope.Success {
				t.Errorf("the resend while B is sent in its place: %s; want it held", resend)
			}
		}
		// The model waits (its next turn comes later than NoticeHold), then calls again, as told.
		for i, e := range literal(t, scoped(), tool, lunch, resend, func() { clk.Advance(hold + 100*time.Millisecond) }, 3)[1:] {
			t.Logf("A' after waiting, call %d: %s", i+1, e)
		}
		if n := g.count(); n != 1 {
			t.Errorf("one email to Ana was asked for; following next=wait literally sent %d (%v)", n, g.effects)
		}
	})
}

// The same for a keyed tool.
//
// The keyed variant: the destination dedupes by RequestRef, and the first
// envelope told the model "Calling send_email again later with the same
// input is safe". The reworded copy has another reference, so the literal
// model that calls again later (after NoticeHold) books the same thing
// twice.
func TestReplace_LiteralModelSendsOnceKeyed(t *testing.T) {
	const hold = 200 * time.Millisecond
	clk := &jumpClock{} // the model's waits skip ahead past NoticeHold
	g := newGatedMail(2)
	g.dedupe = true
	ans := &answers{answer: reconcile.StillPending()}
	tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Reconciler: ans,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 50 * time.Millisecond, NoticeHold: hold, Now: clk.Now})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	t.Logf("A:  %s", first)
	ans.set(reconcile.NotAppliedFenced())
	var b envelope.Envelope
	done := make(chan struct{})
	go func() { defer close(done); b = tool.Invoke(scoped(), lunchRephrased) }()
	<-g.started
	resend := tool.Invoke(scoped(), lunch)
	close(g.gate)
	<-done
	t.Logf("B:  %s", b)
	t.Logf("A': %s", resend)
	for i, e := range literal(t, scoped(), tool, lunch, resend, func() { clk.Advance(hold + 100*time.Millisecond) }, 3)[1:] {
		t.Logf("A' after waiting, call %d: %s", i+1, e)
	}
	if n := g.count(); n != 1 {
		t.Errorf("one email to Ana was asked for; following next=wait literally sent %d (%v)", n, g.effects)
	}
}

// A call in place of an action found not applied announces its success: the
// resend of the same turn is held, in either order.
//
// The same turn in the other order: the reworded copy first, then the
// identical resend. The reworded call's fence asks about the unknown email,
// finds it not applied, approves it for a retry and sends the reworded
// email; the identical resend then consumed that approval and sent the
// original too. Resend first, the same turn sends one email (the control).
// A call that goes on in place of an action found not applied now
// announces its success: the resend is held for NoticeHold.
func TestReplace_ResendAfterTheReplacementIsHeld(t *testing.T) {
	const reworded = lunchRephrased
	for _, order := range []string{"resend-first", "reworded-first"} {
		t.Run(order, func(t *testing.T) {
			m := firstLost()
			ans := &answers{answer: reconcile.StillPending()}
			tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: ans,
				Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
			first := tool.Invoke(scoped(), lunch)
			mustStatus(t, first, envelope.UnknownOutcome)
			ans.set(reconcile.NotAppliedFenced())
			calls := []string{lunch, reworded}
			if order == "reworded-first" {
				calls = []string{reworded, lunch}
			}
			var envs []envelope.Envelope
			for _, in := range calls {
				envs = append(envs, tool.Invoke(scoped(), in))
			}
			for i, e := range envs {
				t.Logf("call %d: %s", i+1, e)
			}
			if n := m.count(); n != 1 {
				t.Errorf("one logical action (email Ana about lunch) left %d emails after one turn of [%s]", n, order)
			}
		})
	}
}

// getFailsFor fails Get for one key while armed, as a store whose read of
// that row times out (a lock, a dropped connection) does; every other
// operation goes through.
type getFailsFor struct {
	agenttool.Store
	mu  sync.Mutex
	key string
}

func (g *getFailsFor) arm(key string) { g.mu.Lock(); g.key = key; g.mu.Unlock() }

func (g *getFailsFor) Get(ctx context.Context, key string) (agenttool.Record, error) {
	g.mu.Lock()
	k := g.key
	g.mu.Unlock()
	if k != "" && key == k {
		return agenttool.Record{}, errStoreDown
	}
	return g.Store.Get(ctx, key)
}

// A replaced action's resend never says the replacement was not done when
// the store could not say what became of it.
//
// The reworded email goes on in place of the unknown one and is sent. The
// identical resend replays "replaced"; reading the replacement's record
// fails (a store error, not "not found"), and the answer says the
// replacement "was not done" (earlier.state failed): the user hears that
// neither email went out, although one did.
func TestReplace_ResendIsNotToldTheReplacementFailedWhenTheStoreCannotSay(t *testing.T) {
	m := firstLost()
	store := &getFailsFor{Store: memstore.New()}
	ans := &answers{answer: reconcile.StillPending()}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: ans,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	ans.set(reconcile.NotAppliedFenced())
	reworded := tool.Invoke(scoped(), lunchRephrased)
	mustStatus(t, reworded, envelope.Success)
	if m.count() != 1 {
		t.Fatalf("the reworded email: %d emails, want 1", m.count())
	}
	store.arm(reworded.RequestRef) // the replacement's row cannot be read for a moment
	resend := tool.Invoke(scoped(), lunch)
	t.Logf("resend: %s", resend)
	if resend.Earlier != nil && resend.Earlier.State == envelope.ActionFailed {
		t.Errorf("the resend says the replacement %s was not done (earlier.state %s, note %q), but its email was sent (%d emails)",
			reworded.RequestRef, resend.Earlier.State, resend.Note, m.count())
	}
}

// An action closed as replaced never loops the model: its answer says
// what was done in its place and that the same input will not send it
// again, and the user's new request runs.
//
// The minutes to Bob end unknown (never delivered). Next turn the model
// sends a different email, lunch with Ana; its fence finds the minutes not
// applied and the lunch email goes on in their place: the minutes are
// closed as replaced, done once by the lunch email (in one conversation,
// writes of a tool may be copies of each other in other words). The
// minutes' resend is told so, and not to call again with the same input;
// calling again anyway gets the same answer (it must never run a second
// copy). The user asks again for the minutes: a new request, in other
// words, runs.
func TestReplace_ReplacedActionAnswerDoesNotLoop(t *testing.T) {
	const minutes = `{"to":"bob@example.com","subject":"Minutes","body":"Attached."}`
	const minutesAgain = `{"to":"bob@example.com","subject":"Minutes of Monday","body":"Attached, as asked."}`
	m := firstLost()
	ans := &answers{answer: reconcile.StillPending()}
	clk := newClock()
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: ans,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, Now: clk.Now})
	first := tool.Invoke(scoped(), minutes)
	mustStatus(t, first, envelope.UnknownOutcome)
	ans.set(reconcile.NotAppliedFenced()) // the minutes never reached the server
	mustStatus(t, tool.Invoke(scoped(), lunch), envelope.Success)
	told := tool.Invoke(scoped(), minutes)
	t.Logf("the minutes again: %s", told)
	if told.Error == nil || told.Error.Code != envelope.CodeReplaced || told.Next != envelope.AskHuman ||
		!strings.Contains(told.Note, "will not send it again") || strings.Contains(told.Note, "ask before calling") {
		t.Fatalf("the minutes after the lunch email: %s; want replaced, ask_human, saying the same input will not send it again", told)
	}
	clk.Advance(time.Minute) // the user is asked
	if again := tool.Invoke(scoped(), minutes); again.Status == envelope.Success {
		t.Errorf("the same input again: %s; want the same answer, never a second copy", again)
	}
	if asked := tool.Invoke(scoped(), minutesAgain); asked.Status != envelope.Success || m.count() != 2 {
		t.Errorf("the user's new request for the minutes: %s, %d emails (%v); want it sent", asked, m.count(), m.effects)
	}
}
