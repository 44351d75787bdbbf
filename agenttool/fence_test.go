package agenttool_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// answers is a reconciler whose answer the test sets, counting checks.
type answers struct {
	mu     sync.Mutex
	answer reconcile.Answer
	checks []string
}

func (a *answers) set(ans reconcile.Answer) { a.mu.Lock(); a.answer = ans; a.mu.Unlock() }

func (a *answers) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	ref := req.Ref
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checks = append(a.checks, ref)
	return a.answer
}

const (
	lunch         = `{"to":"ana@example.com","subject":"Lunch","body":"See you at noon."}`
	lunchReworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Shall we meet at noon?"}`
	// lunchNextWeek is a new action, asked for after the model was told
	// that the lunch email went.
	lunchNextWeek = `{"to":"ana@example.com","subject":"Lunch next week too","body":"And next Friday?"}`
)

// mustBeHeldBack checks that env answers a copy the notice of applied
// (an action found done) held back: earlier_action_applied naming it,
// replayed if asked for again.
func mustBeHeldBack(t *testing.T, what string, env envelope.Envelope, applied string, replayed bool) {
	t.Helper()
	if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied ||
		env.Earlier == nil || env.Earlier.RequestRef != applied || env.Replayed != replayed || !strings.Contains(env.Note, "same input will not") {
		t.Errorf("%s: %s; want earlier_action_applied naming %s (replayed %v), saying the same input will not do it", what, env, applied, replayed)
	}
}

// I9: after unknown_outcome, a reworded resend is a new key, and must not
// run while the first action is unknown. The fence asks the destination
// about the first action, and settles it by the answer.
func TestI9_RewordedResendWaitsForTheUnknownAction(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		var lost sync.Once
		m := &mailServer{script: func(int) (bool, error) {
			var err error
			lost.Do(func() { err = errLostReply }) // the first reply is lost
			return true, err
		}}
		check := &answers{answer: reconcile.StillPending()}
		clk := &clock{now: time.Now()}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check, Now: clk.Now})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)

		// Still pending: the reworded resend does not run.
		held := tool.Invoke(scoped(), lunchReworded)
		mustStatus(t, held, envelope.UnknownOutcome)
		if held.Error.Code != envelope.CodeEarlierUnknown || held.Earlier == nil || held.Earlier.RequestRef != first.RequestRef ||
			held.Earlier.State != envelope.ActionUnknown || held.Next != envelope.DoNotRetry || !strings.Contains(held.Note, "nothing new was done") {
			t.Errorf("reworded resend while the first is pending: %s", held)
		}
		if m.count() != 1 {
			t.Fatalf("a second email went out while the first was unknown: %d", m.count())
		}

		// Applied: the resend still does not run, and says the first happened.
		check.set(reconcile.AppliedWith([]byte(`{"message_id":"<first@mail.test>"}`)))
		told := tool.Invoke(scoped(), lunchReworded)
		mustStatus(t, told, envelope.DefiniteFailure)
		if told.Error.Code != envelope.CodeEarlierApplied || told.Earlier == nil || told.Earlier.State != envelope.ActionSucceeded ||
			string(told.Earlier.Result) != `{"message_id":"<first@mail.test>"}` || told.Next != envelope.AskHuman {
			t.Errorf("reworded resend after the first was found applied: %s", told)
		}
		if m.count() != 1 {
			t.Fatalf("a second email went out: %d", m.count())
		}
		replay := tool.Invoke(scoped(), lunch)
		if replay.Status != envelope.Success || !replay.Reconciled {
			t.Errorf("the first action after the fence settled it: %s", replay)
		}

		// Another call the model made before it read that answer (a second
		// tool call of the same turn, another wording) gets the same answer.
		again := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch?","body":"Noon on Friday?"}`)
		if again.Status != envelope.DefiniteFailure || again.Error.Code != envelope.CodeEarlierApplied || again.Earlier.RequestRef != first.RequestRef {
			t.Errorf("another wording right after the answer: %s", again)
		}
		if m.count() != 1 {
			t.Fatalf("a second email went out: %d", m.count())
		}

		// Once NoticeHold has passed since that answer, the fence has
		// lifted, but the copy it held back stays answered as then: it may
		// be the first reworded, and its model was told it did not run.
		clk.Advance(11 * time.Second)
		mustBeHeldBack(t, "the held-back copy, word for word, after the notice", tool.Invoke(scoped(), lunchReworded), first.RequestRef, true)
		// A new action (the user asked for it) runs.
		mustStatus(t, tool.Invoke(scoped(), lunchNextWeek), envelope.Success)
		if m.count() != 2 {
			t.Errorf("the second action, asked for after the first was settled, ran %d times", m.count()-1)
		}
	})
}

// A keyed tool's held call says what settles the earlier action by
// itself: resending its exact input, whose reference the destination
// dedupes. The lost reply's note and the held call's note agree (and its
// message does not say the action waits for a person), and a model that
// follows the held call's note ends with one email, without asking a
// person.
func TestI9_AKeyedToolsHeldCallSaysResendingTheEarlierInputSettlesIt(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := firstLost()
		m.dedupe = true
		tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.Keyed, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		held := tool.Invoke(scoped(), lunchReworded)
		mustStatus(t, held, envelope.UnknownOutcome)
		if ref, _ := held.UnknownRef(); ref != first.RequestRef || held.Attempts != 0 || held.Next == envelope.AskHuman ||
			!strings.Contains(held.Note, "again with that earlier request's exact input settles it") || strings.Contains(held.Error.Message, "person") {
			t.Errorf("a keyed tool's held call: %s; want it to name the earlier action and say that resending its input settles it", held)
		}
		settled := tool.Invoke(scoped(), lunch)
		mustStatus(t, settled, envelope.Success)
		if m.count() != 1 {
			t.Errorf("%d emails after the earlier input was resent; want 1", m.count())
		}
	})
}

// When the destination says the earlier action was not applied, it is
// settled so, and the new call proceeds.
func TestI9_NotAppliedLiftsTheFence(t *testing.T) {
	store := memstore.New()
	runs := 0
	m := &mailServer{script: func(n int) (bool, error) {
		runs = n
		if n == 1 {
			return false, errLostReply // never delivered, but the caller cannot know
		}
		return true, nil
	}}
	check := &answers{answer: reconcile.StillPending()}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check, ClockSkew: -1,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	check.set(reconcile.NotAppliedYet())
	second := tool.Invoke(scoped(), lunchReworded)
	mustStatus(t, second, envelope.Success)
	// The earlier action is closed: found not applied by the fence, and
	// replaced by the new one, which took its place in the scope.
	rec, err := store.Get(context.Background(), first.RequestRef)
	if err != nil || rec.State != agenttool.Failed || rec.ReplacedBy != second.RequestRef || rec.Resolution == nil || rec.Resolution.By != "fence" {
		t.Errorf("the earlier record after a not-applied verdict: %+v, %v", rec, err)
	}
	if got, _ := store.Get(context.Background(), second.RequestRef); got.Replaces != first.RequestRef {
		t.Errorf("the new record %+v does not say which action it replaces", got)
	}
	if runs != 2 || m.count() != 1 {
		t.Errorf("runs %d, effects %d; want the new action run once", runs, m.count())
	}
}

// The fence's scope: the session by default, the principal, or off.
func TestI9_FenceScopes(t *testing.T) {
	for _, tt := range []struct {
		fence                     agenttool.FenceScope
		sameSession, otherSession bool // held back?
	}{
		{agenttool.FenceSession, true, false},
		{agenttool.FencePrincipal, true, true},
		{agenttool.FenceOff, false, false},
	} {
		t.Run(tt.fence.String(), func(t *testing.T) {
			m := &mailServer{script: func(n int) (bool, error) {
				if n == 1 {
					return true, errLostReply
				}
				return true, nil
			}}
			// At-most-once: nothing can ask the destination, so an unknown
			// action holds the fence until a person settles it.
			tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce, Fence: tt.fence})
			first := tool.Invoke(scoped(), lunch)
			mustStatus(t, first, envelope.UnknownOutcome)
			same := tool.Invoke(scoped(), lunchReworded)
			other := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10"), lunchReworded)
			otherPrincipal := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-42/user-8", "conversation-9"), lunchReworded)
			for _, c := range []struct {
				name string
				env  envelope.Envelope
				held bool
			}{{"same session", same, tt.sameSession}, {"other session", other, tt.otherSession}, {"other principal", otherPrincipal, false}} {
				isHeld := c.env.Error != nil && c.env.Error.Code == envelope.CodeEarlierUnknown
				if isHeld != c.held {
					t.Errorf("%s: %s; held back = %v, want %v", c.name, c.env, isHeld, c.held)
				}
				if isHeld && (c.env.Status != envelope.UnknownOutcome || c.env.Next != envelope.AskHuman) {
					t.Errorf("%s: %s; want unknown_outcome, ask_human", c.name, c.env)
				}
			}
		})
	}
}

// The fence holds across a restart: the unknown record is in the file, and
// a new process finds it by its scope.
func TestI9_FenceSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	store := openBolt(t, path)
	m := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
	first := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce}).Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	store.Close()

	store = openBolt(t, path)
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
	env := tool.Invoke(scoped(), lunchReworded)
	if env.Error == nil || env.Error.Code != envelope.CodeEarlierUnknown || env.Earlier.RequestRef != first.RequestRef {
		t.Errorf("after a restart: %s", env)
	}
	if m.runs.Load() != 1 {
		t.Fatalf("the tool ran %d times", m.runs.Load())
	}
}

// A dead holder's action (its lease lapsed) is unknown too: the fence asks
// about it before a new write.
func TestI9_DeadHolderFencesTheScope(t *testing.T) {
	store := memstore.New()
	c := newClock()
	m := &mailServer{}
	check := &answers{answer: reconcile.StillPending()}
	opts := agenttool.Options{Store: store, Class: agenttool.Keyed, Reconciler: check, Now: c.Now}
	tool := newEmailTool(t, m, opts)
	// A process claims the key and dies before recording anything.
	ref := recordOfRef(t, lunch)
	holderOf(t, store, ref, c.Now(), lunch)
	c.Advance(2 * time.Minute)
	env := tool.Invoke(scoped(), lunchReworded)
	if env.Error == nil || env.Error.Code != envelope.CodeEarlierUnknown || env.Earlier.RequestRef != ref {
		t.Errorf("a new action while a dead holder's is unknown: %s", env)
	}
	if m.runs.Load() != 0 || len(check.checks) != 1 || check.checks[0] != ref {
		t.Errorf("runs %d, checks %v; want the dead holder's action checked and nothing run", m.runs.Load(), check.checks)
	}
}

// If the fence cannot read the store, nothing runs (I4): the claim says an
// earlier action of the scope is unknown, and reading it fails.
func TestI9_FenceFailsClosed(t *testing.T) {
	store := &failingGet{Store: memstore.New()}
	m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
		Reconciler: &answers{answer: reconcile.StillPending()}, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	store.fail.Store(true)
	env := tool.Invoke(scoped(), lunchReworded)
	store.fail.Store(false)
	mustStatus(t, env, envelope.DefiniteFailure)
	if env.Error.Code != envelope.CodeStoreUnavailable || m.runs.Load() != 1 {
		t.Errorf("reading the earlier action failed: %s, runs %d", env, m.runs.Load())
	}
	if store.Len() != 1 {
		t.Errorf("the refused call left a record: %d records", store.Len())
	}
}

// failingGet is a store whose Get fails while fail is set.
type failingGet struct {
	*memstore.Store
	fail atomic.Bool
}

func (f *failingGet) Get(ctx context.Context, key string) (agenttool.Record, error) {
	if f.fail.Load() {
		return agenttool.Record{}, errors.New("index unreadable")
	}
	return f.Store.Get(ctx, key)
}

// A retry an operator approved is fenced like any new write: it does not run
// while another action of the scope is unknown.
//
// Scenario (I9, at-most-once, no reconciler): after an operator settles A as
// not applied, B (A reworded) runs and ends unknown; A sent again runs
// although B is unknown in the same session: the fence is skipped for a
// record approved for a retry.
func TestFence_OperatorApprovedRetryWaitsForTheFence(t *testing.T) {
	store := memstore.New()
	m := &mailServer{script: func(n int) (bool, error) {
		switch n {
		case 1:
			return false, errLostReply // A: not delivered, reply lost
		case 2:
			return true, errLostReply // B: delivered, reply lost
		}
		return true, nil
	}}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	a := tool.Invoke(scoped(), lunch)
	mustStatus(t, a, envelope.UnknownOutcome)
	if err := op.ResolveNotApplied(context.Background(), a.RequestRef, a.Attempts, "maria", "not in the provider's log"); err != nil {
		t.Fatal(err)
	}
	b := tool.Invoke(scoped(), lunchReworded)
	mustStatus(t, b, envelope.UnknownOutcome) // B may have gone out: the session's fence is up
	held := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Shall we meet at noon? Sam"}`)
	t.Logf("another reword while B is unknown: %s", held.Error.Code) // earlier_action_unknown: the fence works for new keys
	again := tool.Invoke(scoped(), lunch)
	t.Logf("A again while B is unknown: %s", again)
	if m.count() > 1 {
		t.Fatalf("%d emails for one logical action; A re-ran while B (%s) was unknown", m.count(), b.RequestRef)
	}
}

// mailbox is a truthful reconciler over a mailServer: delivered refs are
// Pending until indexed (never, here); undelivered refs are Pending while
// unsure (the request might still land), NotApplied afterwards.
type mailbox struct {
	mu     sync.Mutex
	m      *mailServer
	unsure bool
}

func (b *mailbox) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	ref := req.Ref
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m.mu.Lock()
	delivered := false
	for _, e := range b.m.effects {
		delivered = delivered || e == ref
	}
	b.m.mu.Unlock()
	if delivered || b.unsure {
		return reconcile.StillPending() // the mailbox index is catching up
	}
	return reconcile.NotAppliedYet() // truthful: A never arrived
}

// A retry the fence approved (found not applied) is fenced like any new
// write: it does not run while another action of the scope is unknown.
//
// Scenario (I9, reconcilable): A is unknown; the fence settles A as not
// applied and lets B (A reworded) run; B ends unknown. A sent again then
// runs although B is unknown in the same session: hold() runs the fence
// only for claims with Attempts == 0, and a RetryApproved record is
// claimed with its old attempt count.
func TestFence_FenceApprovedRetryWaitsForTheFence(t *testing.T) {
	m := &mailServer{script: func(n int) (bool, error) {
		switch n {
		case 1:
			return false, errLostReply // A: never delivered, reply lost
		case 2:
			return true, errLostReply // B: delivered, reply lost
		}
		return true, nil
	}}
	rec := &mailbox{m: m, unsure: true}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: rec,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}})

	a := tool.Invoke(scoped(), lunch)
	mustStatus(t, a, envelope.UnknownOutcome)
	rec.mu.Lock()
	rec.unsure = false // later the destination can prove A never landed
	rec.mu.Unlock()

	b := tool.Invoke(scoped(), lunchReworded) // fence: A not applied (RetryApproved); B runs, delivered, unknown
	mustStatus(t, b, envelope.UnknownOutcome)
	a2 := tool.Invoke(scoped(), lunch) // the model resends the original while B is unknown
	t.Logf("A again: %s", a2)
	if m.count() > 1 {
		t.Fatalf("%d emails delivered for one logical action (A re-ran while B was unknown): %v", m.count(), m.effects)
	}
}

// A keyed retry of an unknown action, held back by the fence, is never told
// definite_failure: its own effect may have happened.
//
// A keyed tool (with a reconciler for the fence) retries its own unknown
// action B with the same key. The fence finds another unknown action A of
// the session done and holds B back: B's envelope is definite_failure
// ("this call applied nothing") although B's own effect happened, its
// record is still unknown, and `earlier` speaks of A, not of B.
func TestFence_HeldBackRetryOfAnUnknownActionStaysUnknown(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		var mu sync.Mutex
		delivered := map[string]int{} // by request reference (the destination dedupes by key)
		bInside, bGo := make(chan struct{}), make(chan struct{})
		send := func(ctx context.Context, in emailInput) (sent, error) {
			ref := agenttool.RequestRef(ctx)
			mu.Lock()
			first := delivered[ref] == 0
			delivered[ref] = 1
			mu.Unlock()
			if in.Subject == "Lunch on Friday" && first {
				close(bInside) // B is on the wire; its reply will be lost
				<-bGo
			}
			return sent{}, errLostReply
		}
		check := &answers{answer: reconcile.AppliedWith([]byte(`{"message_id":"<a@mail.test>"}`))}
		store := open()
		tool, err := agenttool.New("send_email", "Send.", send, agenttool.Options{WaitTimeout: 200 * time.Millisecond, Store: store, Class: agenttool.Keyed,
			Reconciler: check, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		bDone := make(chan envelope.Envelope)
		go func() { bDone <- tool.Invoke(scoped(), lunchReworded) }()
		<-bInside
		a := tool.Invoke(scoped(), lunch) // A runs while B is in flight (not unknown yet): reply lost
		mustStatus(t, a, envelope.UnknownOutcome)
		close(bGo)
		b := <-bDone
		mustStatus(t, b, envelope.UnknownOutcome) // "calling again later with the same input is safe"

		again := tool.Invoke(scoped(), lunchReworded) // the model follows B's note
		t.Logf("B again: %s", again)
		rec, err := store.Get(context.Background(), b.RequestRef)
		t.Logf("B's record: %v (%v)", rec.State, err)
		mu.Lock()
		bApplied := delivered[b.RequestRef] > 0
		mu.Unlock()
		if again.RequestRef == b.RequestRef && again.Status == envelope.DefiniteFailure && bApplied &&
			(again.Earlier == nil || again.Earlier.RequestRef != b.RequestRef) {
			t.Fatalf("definite_failure for %s, whose effect happened (record %v); earlier names %s",
				b.RequestRef, rec.State, again.Earlier.RequestRef)
		}
	})
}

// An unknown action being checked by the sweeper still fences its scope.
//
// While a sweeper (or an operator, an approver, another call's fence) has
// taken an unknown action over to ask the destination, its record is
// pending with a live lease, which the fence index does not count: a
// reworded resend in the same session is not fenced and runs. The check
// then finds the first email delivered: two emails.
func TestFence_HoldsWhileTheSweeperChecks(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply // A: delivered, reply lost
			}
			return true, nil
		}}
		g := &gate{answer: reconcile.StillPending()}
		tool := newEmailTool(t, m, agenttool.Options{WaitTimeout: 200 * time.Millisecond, Store: store, Class: agenttool.Reconcilable, Reconciler: g})
		a := tool.Invoke(scoped(), lunch)
		mustStatus(t, a, envelope.UnknownOutcome)

		op, _ := agenttool.NewOperator(store, tool)
		g.set(reconcile.AppliedWith([]byte(`{"message_id":"<a@mail.test>"}`)), true)
		swept := make(chan agenttool.SweepReport)
		go func() { rep, _ := op.SweepOnce(context.Background(), agenttool.SweeperOptions{}); swept <- rep }()
		<-g.entered // the sweeper is asking the mailbox about A

		b := tool.Invoke(scoped(), lunchReworded) // the model rewords and resends
		t.Logf("reworded resend while A is being checked: %s", b)
		close(g.open)
		t.Logf("sweep: %+v", <-swept)
		if m.count() > 1 {
			t.Fatalf("%d emails: the reworded resend ran while A's outcome was unknown (being checked), and A was delivered", m.count())
		}
	})
}

// An unknown action being checked by one reword's fence still fences a
// parallel reword.
//
// The same with two reworded resends from parallel goroutines: the first
// one's fence takes A over to check it; the second one's claim no longer
// sees A and runs.
func TestFence_HoldsAgainstParallelRewords(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply // A: delivered, reply lost
			}
			return true, nil
		}}
		g := &gate{answer: reconcile.StillPending()}
		tool := newEmailTool(t, m, agenttool.Options{WaitTimeout: 200 * time.Millisecond, Store: open(), Class: agenttool.Reconcilable, Reconciler: g})
		a := tool.Invoke(scoped(), lunch)
		mustStatus(t, a, envelope.UnknownOutcome)

		g.set(reconcile.StillPending(), true)
		first := make(chan envelope.Envelope)
		go func() { first <- tool.Invoke(scoped(), lunchReworded) }()
		<-g.entered // reword 1's fence is asking about A
		second := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch Friday?","body":"Noon on Friday?"}`)
		close(g.open)
		t.Logf("reword 1: %s", <-first)
		t.Logf("reword 2: %s", second)
		if m.count() > 1 {
			t.Fatalf("%d emails while A was unknown (the mailbox still says pending)", m.count())
		}
	})
}

// finishFails is a store whose Finish fails while fail is set (the
// store's write times out mid-call).
type finishFails struct {
	agenttool.Store
	fail atomic.Bool
}

func (f *finishFails) Finish(ctx context.Context, r storekit.FinishRequest) error {
	if f.fail.Load() {
		return errors.New("write timed out")
	}
	return f.Store.Finish(ctx, r)
}

// A keyed retry of an unknown action whose outcome cannot be written
// answers unknown_outcome; it never panics, and the record stays held
// (pending, then unknown), never free.
func TestFence_HeldBackRetryAnswersWhenTheStoreFails(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		c := newClock()
		inner := open()
		s := &finishFails{Store: inner}
		m := &mailServer{dedupe: true, script: func(n int) (bool, error) { return true, errLostReply }}
		tool := newEmailTool(t, m, agenttool.Options{Store: s, Class: agenttool.Keyed, Now: c.Now,
			Reconciler: &answers{answer: reconcile.StillPending()}, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		a := tool.Invoke(scoped(), lunch)
		mustStatus(t, a, envelope.UnknownOutcome)

		s.fail.Store(true)
		var env envelope.Envelope
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Invoke panicked: %v", r)
				}
			}()
			env = tool.Invoke(scoped(), lunch) // the model follows "calling again later is safe"
		}()
		t.Logf("keyed retry while the store's writes fail: %s", env)
		mustStatus(t, env, envelope.UnknownOutcome)
		if rec, err := inner.Get(context.Background(), a.RequestRef); err != nil || (rec.State != agenttool.Pending && rec.State != agenttool.Unknown) {
			t.Errorf("the record after the failed write: %+v, %v; want it held", rec, err)
		}
	})
}

// An action whose own call is checking its unknown attempt fences its scope.
//
// A's attempt returns an unknown outcome (delivered, reply lost), and A's
// own call asks the mailbox, which is slow. A's record is pending with a
// live lease and not marked TakenOver, so the unknown fence does not count
// it, although A's action may already have applied and is being checked —
// exactly what TakenOver marks when a sweeper or a later call checks it.
// A reworded resend in the same session (the user's UI timed out and the
// turn is regenerated) runs. A is then found delivered: two emails.
func TestFence_HoldsWhileACallChecksItsOwnUnknownAttempt(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply // A: delivered, reply lost
			}
			return true, nil
		}}
		g := &gate{}
		g.set(reconcile.AppliedWith([]byte(`{"message_id":"<a@mail.test>"}`)), true)
		tool := newEmailTool(t, m, agenttool.Options{WaitTimeout: 200 * time.Millisecond, Store: open(), Class: agenttool.Reconcilable, Reconciler: g})
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

// The scope index and the slot always agree with the records, on every
// store.
//
// A random walk of claims (with fence scopes of sessions or principals),
// renewals (also with clocks that disagree), finishes (with notices),
// releases, takeovers, sweeps and boltstore restarts. After every step, the
// index answers (ListUnknown with Tool+Principal[+Session]) equal the full
// listing filtered; at most one record holds each slot; and a claim is
// granted only if no other record held its slot (or that record's notice
// had ended), and refused only for one that did.
func TestFence_ScopeIndexAgreesWithTheFullListing(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		seeds := uint64(12)
		if _, remote := open().(*pgstore.Store); remote {
			seeds = 3 // some 10,000 queries a seed
		}
		for seed := range seeds {
			walkIndex(t, seed, open)
		}
	})
}

func walkIndex(t *testing.T, seed uint64, open func() agenttool.Store) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	s := open()
	var path string
	if b, ok := s.(*boltstore.Store); ok {
		path = b.Path()
	}
	tools := []string{"send_email", "send_email2"}
	principals := []agenttool.Digest{{0xa1}, {0xb2}}
	sessions := []agenttool.Digest{{0x51}, {0x52}}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	type held struct {
		key   string
		token uint64
	}
	var holds []held
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d/%d", seed, i)
	}
	// every key keeps one tool, principal and session
	scopeOf := func(k int) (string, agenttool.Digest, agenttool.Digest) {
		return tools[k%2], principals[(k/2)%2], sessions[(k/4)%2]
	}
	all := func(at time.Time) []agenttool.Record {
		recs, err := s.ListUnknown(ctx, storekit.ListRequest{Now: at, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	// every record, whatever its state: the oracle of the fence, which also
	// counts pending records taken over from an unknown outcome
	every := func() []agenttool.Record {
		var recs []agenttool.Record
		for _, k := range keys {
			if r, err := s.Get(ctx, k); err == nil {
				recs = append(recs, r)
			}
		}
		return recs
	}
	check := func(step int, what string, at time.Time) {
		t.Helper()
		full, records := all(at), every()
		for _, tool := range tools {
			for _, p := range principals {
				for _, sess := range append([]*agenttool.Digest{nil}, &sessions[0], &sessions[1]) {
					req := storekit.ListRequest{Tool: tool, Principal: &p, Session: sess, Now: at, Limit: 1000}
					got, err := s.ListUnknown(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					var want, have []string
					for _, r := range full {
						if req.Matches(&r) {
							want = append(want, r.Key)
						}
					}
					for _, r := range got {
						have = append(have, r.Key)
					}
					if !slices.Equal(want, have) {
						t.Fatalf("seed %d step %d (%s): scope listing %s/%x/%v: %v, full listing says %v", seed, step, what, tool, p[:1], sess != nil, have, want)
					}
				}
			}
		}
		holders := map[storekit.Slot][]string{}
		for _, r := range records {
			if r.HoldsSlot() {
				holders[r.Slot()] = append(holders[r.Slot()], r.Key)
			}
		}
		for sl, keys := range holders {
			if len(keys) > 1 {
				t.Fatalf("seed %d step %d (%s): %d records hold the slot of %s/%x: %v", seed, step, what, len(keys), sl.Tool, sl.Scope[:1], keys)
			}
		}
	}
	for step := range 300 {
		k := rng.IntN(len(keys))
		tool, p, sess := scopeOf(k)
		skew := time.Duration(rng.IntN(5)-2) * 20 * time.Second // callers' clocks disagree by up to ±40s
		at := now.Add(skew)
		var what string
		switch op := rng.IntN(10); {
		case op < 3 || len(holds) == 0:
			// A key's fence scope is its session's, its principal's or
			// none (as tools fenced per session, per principal, or not at
			// all have it).
			scope := sess
			switch {
			case k%3 == 0:
				scope = p
			case k%4 == 1:
				scope = agenttool.Digest{}
			}
			req := storekit.ClaimRequest{Key: keys[k], Tool: tool, Principal: p, Session: sess, Fingerprint: agenttool.Digest{1},
				Owner: fmt.Sprintf("o%d", step), Now: at, Lease: time.Minute, TakeOver: rng.IntN(2) == 0, FenceScope: scope}
			before := every()
			res, err := s.Claim(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			what = fmt.Sprintf("claim %s takeover=%v: claimed=%v blocked=%v", req.Key, req.TakeOver, res.Claimed, res.Blocked != nil)
			// The records of the slot another key held before the claim,
			// and the records beside it (claimed under the other fence),
			// which hold back a record entering the slot.
			var others, beside []agenttool.Record
			inSlot := false
			for _, r := range before {
				if r.Key != req.Key && r.HoldsSlot() && r.Slot() == req.Slot() {
					others = append(others, r)
				}
				if req.Beside(&r) {
					beside = append(beside, r)
				}
				if r.Key == req.Key && r.HoldsSlot() && r.Slot() == req.Slot() {
					inSlot = true
				}
			}
			switch {
			case res.Blocked != nil:
				if !slices.ContainsFunc(append(others, beside...), func(r agenttool.Record) bool { return r.Key == res.Blocked.Key }) {
					t.Fatalf("seed %d step %d: %s by %s, which neither held the slot (holders %v) nor was beside it (%v)", seed, step, what, res.Blocked.Key, others, beside)
				}
			case res.Claimed:
				holds = append(holds, held{req.Key, res.Record.Token})
				for _, r := range others {
					if !(r.State == agenttool.Succeeded && !at.Before(r.NoticeUntil)) {
						t.Fatalf("seed %d step %d: %s while %s (%v) held the slot", seed, step, what, r.Key, r.State)
					}
				}
				for _, r := range beside {
					if !inSlot && res.Record.HoldsSlot() && !(r.State == agenttool.Succeeded && !at.Before(r.NoticeUntil)) {
						t.Fatalf("seed %d step %d: %s into the slot while %s (%v) was beside it", seed, step, what, r.Key, r.State)
					}
				}
			}
		case op < 6:
			h := holds[rng.IntN(len(holds))]
			err := s.Renew(ctx, storekit.RenewRequest{Key: h.key, Token: h.token, Until: at.Add(time.Duration(rng.IntN(120)) * time.Second), Now: at})
			what = fmt.Sprintf("renew %s: %v", h.key, err)
		case op < 8:
			i := rng.IntN(len(holds))
			h := holds[i]
			states := []agenttool.State{agenttool.Succeeded, agenttool.Failed, agenttool.Unknown}
			st := states[rng.IntN(3)]
			req := storekit.FinishRequest{Key: h.key, Token: h.token, State: st, Attempts: 1, Now: at, TTL: time.Hour,
				RetryApproved: st == agenttool.Unknown && rng.IntN(3) == 0, HeldUntil: at.Add(-time.Duration(rng.IntN(3)) * time.Minute)}
			if st == agenttool.Succeeded && rng.IntN(2) == 0 {
				req.NoticeUntil = at.Add(time.Duration(rng.IntN(3)) * 20 * time.Second)
			}
			err := s.Finish(ctx, req)
			what = fmt.Sprintf("finish %s %v: %v", h.key, st, err)
			holds = slices.Delete(holds, i, i+1)
		case op < 9:
			i := rng.IntN(len(holds))
			h := holds[i]
			err := s.Release(ctx, h.key, h.token)
			what = fmt.Sprintf("release %s: %v", h.key, err)
			holds = slices.Delete(holds, i, i+1)
		default:
			if path != "" && rng.IntN(2) == 0 {
				s.(*boltstore.Store).Close()
				b, err := boltstore.Open(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				s = b
				what = "restart"
			} else {
				n, err := s.Sweep(ctx, storekit.SweepRequest{Now: at})
				what = fmt.Sprintf("sweep: %d %v", n, err)
			}
		}
		now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
		for _, probe := range []time.Time{now, now.Add(-time.Minute), now.Add(time.Minute)} {
			check(step, what, probe)
		}
	}
}

// truthfulMail delivers by request ref and knows what it delivered; its
// reconciler tells the truth (and, the server being synchronous, that
// nothing can land later).
type truthfulMail struct {
	mu    sync.Mutex
	count map[string]int
	lose  func(in emailInput) (deliver bool, lost bool)
	runs  int
}

func (m *truthfulMail) send(ctx context.Context, in emailInput) (sent, error) {
	ref := agenttool.RequestRef(ctx)
	deliver, lost := true, false
	if m.lose != nil {
		deliver, lost = m.lose(in)
	}
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // the server's latency; orders nothing
	m.mu.Lock()
	m.runs++
	if deliver {
		m.count[ref]++
	}
	m.mu.Unlock()
	if lost {
		return sent{}, errLostReply
	}
	return sent{MessageID: "<" + ref + "@mail.test>"}, nil
}

func (m *truthfulMail) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.count[req.Ref] > 0 {
		return reconcile.AppliedWith([]byte(`{"message_id":"<` + req.Ref + `@mail.test>"}`))
	}
	return reconcile.NotAppliedFenced()
}

func (m *truthfulMail) delivered(ref string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count[ref]
}

// A scope fenced by unknown actions recovers without a person once the
// destination tells the truth, with at most one effect per key.
//
// Three earlier unknown actions in one scope, then 40 goroutines at once:
// the model's copies of them (identical and reworded) and an
// orchestrator's distinct new actions, some of whose replies are lost
// too. Then, after the scope is quiet and NoticeHold has passed, every
// action is called again one at a time: the scope must recover without a
// person (the reconciler tells the truth), every key must have at most one
// effect, and no success may be without its effect.
func TestFence_ScopeRecoversAfterABurstOverThreeUnknowns(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &truthfulMail{count: map[string]int{}}
		var phase1 sync.Mutex
		lostFirst := map[string]bool{}
		m.lose = func(in emailInput) (bool, bool) {
			phase1.Lock()
			defer phase1.Unlock()
			if in.Subject == "seed" && !lostFirst[in.To] {
				lostFirst[in.To] = true
				return in.To != "a2@example.com", true // a1, a3 delivered; a2 not; replies lost
			}
			if in.Subject == "flaky" {
				d := rand.IntN(2) == 0
				return d, !d || rand.IntN(2) == 0
			}
			return true, false
		}
		tool, err := agenttool.New("send_email", "Send an email.", m.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
			Reconciler: m, Retry: agenttool.RetryPolicy{MaxAttempts: 1}, NoticeHold: 150 * time.Millisecond,
			WaitTimeout: 300 * time.Millisecond, Lease: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// The reconciler says "pending" while the seeds are made, so that
		// they stay unknown.
		var seeds []string
		for _, to := range []string{"a1", "a2", "a3"} {
			in := fmt.Sprintf(`{"to":"%s@example.com","subject":"seed","body":"x"}`, to)
			seeds = append(seeds, in)
		}
		pend := &answers{answer: reconcile.StillPending()}
		seedTool, err := agenttool.New("send_email", "Send an email.", m.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
			Reconciler: pend, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		var seedRef string
		for _, in := range seeds {
			env := seedTool.Invoke(scoped(), in)
			if env.Status != envelope.UnknownOutcome {
				t.Fatalf("seed %s: %s", in, env)
			}
			seedRef = env.RequestRef
		}
		pool := append([]string{}, seeds...)
		for _, to := range []string{"a1", "a2", "a3"} {
			pool = append(pool, fmt.Sprintf(`{"to":"%s@example.com","subject":"seed again","body":"x, reworded"}`, to))
		}
		for i := 0; i < 6; i++ {
			pool = append(pool, fmt.Sprintf(`{"to":"n%d@example.com","subject":"new","body":"y"}`, i))
		}
		for i := 0; i < 3; i++ {
			pool = append(pool, fmt.Sprintf(`{"to":"f%d@example.com","subject":"flaky","body":"z"}`, i))
		}
		type result struct {
			in  string
			env envelope.Envelope
		}
		var mu sync.Mutex
		var results []result
		var wg sync.WaitGroup
		for g := 0; g < 40; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 3; k++ {
					in := pool[rand.IntN(len(pool))]
					env := tool.Invoke(scoped(), in)
					mu.Lock()
					results = append(results, result{in, env})
					mu.Unlock()
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("the calls did not end within a minute")
		}
		codes := map[string]int{}
		for _, r := range results {
			c := string(r.env.Status)
			if r.env.Error != nil {
				c += "/" + r.env.Error.Code
			}
			codes[c]++
			if r.env.Status == envelope.Success && m.delivered(r.env.RequestRef) == 0 {
				t.Errorf("success without an effect: %s", r.env)
			}
		}
		t.Logf("burst: %v", codes)

		// Converge: call every action again, one at a time, until nothing
		// answers earlier_action_* / in_progress, with NoticeHold between rounds.
		var last map[string]envelope.Envelope
		for round := 0; round < 15; round++ {
			time.Sleep(200 * time.Millisecond) // NoticeHold (150ms) passes between rounds, as between a model's turns; orders nothing
			last = map[string]envelope.Envelope{}
			stuck := 0
			for _, in := range pool {
				env := tool.Invoke(scoped(), in)
				last[in] = env
				if env.Status == envelope.UnknownOutcome || (env.Error != nil && (env.Error.Code == envelope.CodeEarlierApplied)) {
					stuck++
				}
			}
			if stuck == 0 {
				break
			}
		}
		for in, env := range last {
			if env.Status == envelope.UnknownOutcome {
				t.Errorf("after the scope was quiet and every action was asked about 15 times: %s → %s", in, env)
			}
		}
		m.mu.Lock()
		for ref, n := range m.count {
			if n > 1 {
				t.Errorf("%s delivered %d times", ref, n)
			}
		}
		m.mu.Unlock()
		seedRec, err := store.Get(context.Background(), seedRef)
		if err != nil {
			t.Fatal(err)
		}
		held, err := store.ListUnknown(context.Background(), storekit.ListRequest{Tool: "send_email", Principal: &seedRec.Principal, Now: time.Now(), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range held {
			t.Errorf("still held/unknown at the end: %s %v owner=%q", r.Key, r.State, r.Owner)
		}
	})
}

// A retry approved before the turn (by the sweeper, an operator or opcmd)
// holds a reworded copy and the identical resend of the turn: one email.
//
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
func TestFence_ApprovedRetryHoldsRewordAndResend(t *testing.T) {
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

				calls := []string{lunch, lunchRephrased}
				if order == "reworded-first" {
					calls = []string{lunchRephrased, lunch}
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

// I9 across an upgrade: a store written before the fence had slots keeps
// every open action of a scope fenced, not only its newest.
//
// The earlier version wrote records without a fence scope (as a tool with
// the fence off does today) and let two writes of a session run at once:
// two emails of one conversation ended unknown, the lunch email (which was
// in fact delivered) and, later, another one (never delivered). The file
// is opened by this version (schema 5 → current): the newest open record
// of the session takes the slot, the older one none. A reworded lunch
// email meets the newest, whose destination says not applied, goes on in
// its place, and is sent while the lunch email is still unknown: a second
// lunch email.
func TestI9_UpgradedStoreFencesEveryOpenAction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	store := openBolt(t, path)
	m := &mailServer{script: func(n int) (bool, error) {
		switch n {
		case 1:
			return true, errLostReply // delivered, its reply lost
		case 2:
			return false, errLostReply // not delivered, its reply lost
		}
		return true, nil
	}}
	old := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Fence: agenttool.FenceOff})
	lunchEnv := old.Invoke(scoped(), lunch)
	mustStatus(t, lunchEnv, envelope.UnknownOutcome)
	other := old.Invoke(scoped(), `{"to":"bob@example.com","subject":"Minutes","body":"Attached."}`)
	mustStatus(t, other, envelope.UnknownOutcome)
	// As the earlier version left the file: schema 5, no slots.
	if err := store.DB().Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte("retrysafe/slots")); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
		return tx.Bucket([]byte("retrysafe/meta")).Put([]byte("schema"), []byte("5"))
	}); err != nil {
		t.Fatal(err)
	}
	store.Close()

	store = openBolt(t, path)
	// The other email: proven never delivered; the lunch email: the mail
	// log cannot say yet (pending).
	check := &byRef{ans: map[string]reconcile.Answer{other.RequestRef: reconcile.NotAppliedFenced()}}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check})
	env := tool.Invoke(scoped(), lunchRephrased)
	t.Logf("reworded lunch email after the upgrade: %s", env)
	for _, ref := range []string{lunchEnv.RequestRef, other.RequestRef} {
		rec, err := store.Get(context.Background(), ref)
		t.Logf("%s: %v (replaced by %q), %v", ref, rec.State, rec.ReplacedBy, err)
	}
	if runs := m.runs.Load(); runs != 2 {
		t.Errorf("the reworded lunch email ran while the first lunch email (%s) is unknown: %d runs, %d emails delivered, answered %s",
			lunchEnv.RequestRef, runs, m.count(), env.Status)
	}
}

// I9 across an upgrade, for a principal-wide fence: an action a store
// written before slots left unknown keeps every new write of its tool and
// principal from running, whatever session it comes from.
//
// The earlier version wrote records without a fence scope; the upgrade gives
// each session's newest open record its session's slot. A tool fenced by
// principal asks for its principal's slot, which nothing holds: the
// principal's next email ran while the lunch email was still unknown.
func TestI9_UpgradedStoreFencesAPrincipalWideScope(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	store := openBolt(t, path)
	m := &mailServer{script: func(n int) (bool, error) {
		if n == 1 {
			return true, errLostReply // delivered, its reply lost
		}
		return true, nil
	}}
	old := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Fence: agenttool.FenceOff})
	lunchEnv := old.Invoke(scoped(), lunch)
	mustStatus(t, lunchEnv, envelope.UnknownOutcome)
	// As the earlier version left the file: schema 5, no slots.
	if err := store.DB().Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte("retrysafe/slots")); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
		return tx.Bucket([]byte("retrysafe/meta")).Put([]byte("schema"), []byte("5"))
	}); err != nil {
		t.Fatal(err)
	}
	store.Close()

	store = openBolt(t, path)
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Fence: agenttool.FencePrincipal})
	for _, ctx := range []context.Context{scoped(), agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10")} {
		env := tool.Invoke(ctx, `{"to":"bob@example.com","subject":"Minutes","body":"Attached."}`)
		t.Logf("another email of the principal after the upgrade: %s", env)
		if env.Error == nil || env.Error.Code != envelope.CodeEarlierUnknown {
			t.Errorf("a new email of the principal while the lunch email (%s) is unknown: %s; want earlier_action_unknown", lunchEnv.RequestRef, env.Status)
		}
	}
	if runs := m.runs.Load(); runs != 1 {
		t.Errorf("the principal's next email ran while the lunch email (%s) is unknown: %d runs", lunchEnv.RequestRef, runs)
	}
}

// I9 when a tool's fence is widened to the principal: an action claimed
// under the old setting (none, or its session's slot) and left unknown
// holds back the principal's new writes in every session, though it holds
// no slot they ask for. Each new call gives its key back; once an
// operator settles the earlier action, the next one runs.
func TestI9_AFenceWidenedToThePrincipalHoldsTheOldSettingsUnknownActions(t *testing.T) {
	for _, before := range []agenttool.FenceScope{agenttool.FenceOff, agenttool.FenceSession} {
		t.Run(before.String(), func(t *testing.T) {
			store := memstore.New()
			m := &mailServer{script: func(n int) (bool, error) {
				if n == 1 {
					return true, errLostReply // delivered, its reply lost
				}
				return true, nil
			}}
			old := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Fence: before})
			first := old.Invoke(scoped(), lunch)
			mustStatus(t, first, envelope.UnknownOutcome)

			tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Fence: agenttool.FencePrincipal})
			minutes := `{"to":"bob@example.com","subject":"Minutes","body":"Attached."}`
			for _, ctx := range []context.Context{scoped(), agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10")} {
				env := tool.Invoke(ctx, minutes)
				if env.Error == nil || env.Error.Code != envelope.CodeEarlierUnknown || env.Earlier == nil || env.Earlier.RequestRef != first.RequestRef {
					t.Fatalf("a new email of the principal while %s (claimed with the fence %s) is unknown: %s; want earlier_action_unknown naming it", first.RequestRef, before, env)
				}
				if _, err := store.Get(context.Background(), env.RequestRef); !errors.Is(err, agenttool.ErrNotFound) {
					t.Errorf("the held call kept its key (%v); it must give it back", err)
				}
			}
			if runs := m.runs.Load(); runs != 1 {
				t.Fatalf("the principal's next email ran while %s is unknown: %d runs", first.RequestRef, runs)
			}
			op, err := agenttool.NewOperator(store, old)
			if err != nil {
				t.Fatal(err)
			}
			if err := op.ResolveApplied(context.Background(), first.RequestRef, first.Attempts, nil, "maria", "in the provider's log"); err != nil {
				t.Fatal(err)
			}
			mustStatus(t, tool.Invoke(agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10"), minutes), envelope.Success)
		})
	}
}

// A principal-wide fence that cannot look for the scope's other unknown
// actions runs nothing: the call gives its key back and says the store
// failed, and the same call runs once the store answers again.
func TestI9_APrincipalWideFenceThatCannotLookRunsNothing(t *testing.T) {
	store := &faultyStore{Store: memstore.New()}
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Fence: agenttool.FencePrincipal})
	store.failList.Store(true)
	env := tool.Invoke(scoped(), lunch)
	if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != envelope.CodeStoreUnavailable {
		t.Fatalf("a principal-wide fence whose store cannot list: %s; want definite_failure store_unavailable", env)
	}
	if _, err := store.Get(context.Background(), env.RequestRef); !errors.Is(err, agenttool.ErrNotFound) || m.runs.Load() != 0 {
		t.Fatalf("the refused call ran %d times and left its key (%v)", m.runs.Load(), err)
	}
	store.failList.Store(false)
	mustStatus(t, tool.Invoke(scoped(), lunch), envelope.Success)
	if m.runs.Load() != 1 {
		t.Fatalf("the email ran %d times; want 1", m.runs.Load())
	}
}

// I9 when a tool's fence is narrowed to the session: an action claimed
// under the old setting (none, or its principal's slot) and left unknown
// holds back its session's new writes, on every store, though it holds no
// slot they ask for; another session's writes run. With a reconciler, the
// fence asks about it first: found applied, the user is told; found not
// applied, the new email goes on in its place and the old one is closed.
func TestI9_AFenceNarrowedToTheSessionHoldsTheOldSettingsUnknownActions(t *testing.T) {
	minutes := `{"to":"bob@example.com","subject":"Minutes","body":"Attached."}`
	for _, before := range []agenttool.FenceScope{agenttool.FenceOff, agenttool.FencePrincipal} {
		for _, verdict := range []string{"nobody can ask", "applied", "not applied"} {
			t.Run(before.String()+"/"+verdict, func(t *testing.T) {
				storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
					store := open()
					m := &mailServer{script: func(n int) (bool, error) {
						if n == 1 {
							return verdict == "applied", errLostReply // its reply lost
						}
						return true, nil
					}}
					old := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Fence: before})
					first := old.Invoke(scoped(), lunch)
					mustStatus(t, first, envelope.UnknownOutcome)

					opts := agenttool.Options{Store: store, Class: agenttool.AtMostOnce}
					if verdict != "nobody can ask" {
						ans := reconcile.NotAppliedFenced()
						if verdict == "applied" {
							ans = reconcile.AppliedWith([]byte(`{"message_id":"m-1"}`))
						}
						opts.Class = agenttool.Reconcilable
						opts.Reconciler = &byRef{ans: map[string]reconcile.Answer{first.RequestRef: ans}}
					}
					tool := newEmailTool(t, m, opts)
					env := tool.Invoke(scoped(), lunchRephrased)
					switch verdict {
					case "nobody can ask":
						if env.Error == nil || env.Error.Code != envelope.CodeEarlierUnknown || env.Earlier == nil || env.Earlier.RequestRef != first.RequestRef {
							t.Fatalf("a reworded email of the session while %s (fence %s) is unknown: %s; want earlier_action_unknown naming it", first.RequestRef, before, env)
						}
					case "applied":
						if env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied {
							t.Fatalf("a reworded email of the session after %s was found applied: %s; want earlier_action_applied", first.RequestRef, env)
						}
					case "not applied":
						mustStatus(t, env, envelope.Success)
						if rec, err := store.Get(context.Background(), first.RequestRef); err != nil || rec.ReplacedBy != env.RequestRef {
							t.Fatalf("the old action after the new one went on in its place: %+v, %v; want replaced by %s", rec, err, env.RequestRef)
						}
					}
					if want := map[string]int{"nobody can ask": 1, "applied": 1, "not applied": 2}[verdict]; int(m.runs.Load()) != want {
						t.Fatalf("%d runs; want %d", m.runs.Load(), want)
					}
					if verdict == "nobody can ask" {
						mustStatus(t, tool.Invoke(agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10"), minutes), envelope.Success)
					}
				})
			})
		}
	}
}

// The notice when a tool's fence is narrowed to the session: an action
// claimed under the old setting, unknown, and found applied by a new write's
// fence holds the session's other new writes for NoticeHold, as the slot's
// holder would — the model that reads "the earlier email was sent" and
// sends it again, or a second copy of the same turn, sends nothing.
func TestI9_AnOldSettingsActionFoundAppliedHoldsTheSessionsNotice(t *testing.T) {
	for _, before := range []agenttool.FenceScope{agenttool.FenceOff, agenttool.FencePrincipal} {
		t.Run(before.String(), func(t *testing.T) {
			storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
				store := open()
				m := &mailServer{script: func(n int) (bool, error) {
					if n == 1 {
						return true, errLostReply // sent, its reply lost
					}
					return true, nil
				}}
				clk := &clock{now: time.Now()}
				old := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Fence: before, Now: clk.Now})
				first := old.Invoke(scoped(), lunch)
				mustStatus(t, first, envelope.UnknownOutcome)

				check := &byRef{ans: map[string]reconcile.Answer{first.RequestRef: reconcile.AppliedWith([]byte(`{"message_id":"m-1"}`))}}
				tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check, Now: clk.Now})
				told := tool.Invoke(scoped(), lunchRephrased)
				if told.Error == nil || told.Error.Code != envelope.CodeEarlierApplied {
					t.Fatalf("a reworded email after %s was found applied: %s; want earlier_action_applied", first.RequestRef, told)
				}
				for _, in := range []string{lunchRephrased, `{"to":"ana@example.com","subject":"Lunch?","body":"Noon on Friday?"}`} {
					env := tool.Invoke(scoped(), in)
					if env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied || env.Earlier == nil || env.Earlier.RequestRef != first.RequestRef {
						t.Errorf("another email of the session within the notice of %s: %s; want earlier_action_applied naming it", first.RequestRef, env)
					}
				}
				if n := m.runs.Load(); n != 1 {
					t.Fatalf("%d emails sent within the notice of the first, found applied; want 1", n)
				}
			})
		})
	}
}

// A retry approved before the turn holds the turn's reworded copy and
// resend across a change of the tool's fence to the session: the lunch
// email, claimed under the old setting, ended unknown, and an operator
// found it not applied and approved one more attempt. In the next turn
// the model sends the email again and a reworded copy of it, in either
// order: one email goes out, as when the fence was the session's all
// along (TestFence_ApprovedRetryHoldsRewordAndResend).
func TestI9_AnOldSettingsApprovedRetryHoldsRewordAndResend(t *testing.T) {
	for _, before := range []agenttool.FenceScope{agenttool.FenceOff, agenttool.FencePrincipal} {
		for _, order := range []string{"resend-first", "reworded-first"} {
			t.Run(before.String()+"/"+order, func(t *testing.T) {
				storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
					store := open()
					m := firstLost()
					old := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Fence: before, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
					first := old.Invoke(scoped(), lunch)
					mustStatus(t, first, envelope.UnknownOutcome)
					tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
					op, err := agenttool.NewOperator(store, tool)
					if err != nil {
						t.Fatal(err)
					}
					if err := op.ResolveNotApplied(context.Background(), first.RequestRef, first.Attempts, "maria", "not in the mail log"); err != nil {
						t.Fatal(err)
					}
					calls := []string{lunch, lunchRephrased}
					if order == "reworded-first" {
						calls = []string{lunchRephrased, lunch}
					}
					for i, in := range calls {
						t.Logf("call %d: %s", i+1, tool.Invoke(scoped(), in))
					}
					if n := m.count(); n != 1 {
						t.Errorf("one logical action (email Ana about lunch) left %d emails after one turn of [%s] (%v)", n, order, m.effects)
					}
				})
			})
		}
	}
}

// A principal-wide fence tells the truth about where the earlier action
// is: an answer about another conversation's action does not say it is
// "in this conversation".
//
// FencePrincipal: the lunch email of conversation 9 is unknown. In
// conversation 10 the user asks for an unrelated email; it is held back,
// and the note says "An earlier send_email in this conversation may
// already have happened ... Tell the user it is pending": the model tells
// its user that an email of theirs in this chat is pending, which this
// conversation never sent. For an at-most-once tool the same note says the
// earlier email "is still being verified", while nothing can verify it.
func TestFence_PrincipalScopeDoesNotSayTheEarlierIsInThisConversation(t *testing.T) {
	m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce, Fence: agenttool.FencePrincipal})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	other := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10"),
		`{"to":"bob@example.com","subject":"Minutes","body":"Attached."}`)
	t.Logf("conversation 10: %s", other)
	if other.Error == nil || other.Error.Code != envelope.CodeEarlierUnknown {
		t.Fatalf("conversation 10 while conversation 9's email is unknown: %s; want earlier_action_unknown", other)
	}
	if strings.Contains(other.Note, "in this conversation") {
		t.Errorf("the answer to conversation 10 says conversation 9's email is in this conversation: %q", other.Note)
	}
	// The same note says the earlier email "is still being verified";
	// nothing verifies it (no reconciler: it waits for a person).
	if strings.Contains(other.Note, "being verified") {
		t.Errorf("the note says the earlier email is being verified, and its message says no reconciler can ask: %q", other.Note)
	}
}

// I9 through a copy: an unknown action that storekit.Copy moved beside
// its slot (the target's action of the same tool and scope holds it,
// found not applied and approved for one more attempt) holds back every
// new write of its tool in its scope until it is settled — the approved
// action's retry, and a new action that takes the approved attempt in its
// place — under either fence.
func TestI9_AnActionCopiedBesideItsSlotHoldsBackTheScopesWrites(t *testing.T) {
	const (
		minutes = `{"to":"bob@example.com","subject":"Minutes","body":"Attached."}`
		dinner  = `{"to":"eva@example.com","subject":"Dinner","body":"At eight."}`
	)
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		// A kind of store this machine cannot give (PostgreSQL without
		// DATABASE_URL) skips here, in its own subtest: the subtests below
		// open theirs with this one's testing.T.
		open()
		for _, fence := range []agenttool.FenceScope{agenttool.FenceSession, agenttool.FencePrincipal} {
			for _, next := range []string{minutes, dinner} {
				t.Run(fence.String()+"/"+map[string]string{minutes: "the approved retry", dinner: "a new email"}[next], func(t *testing.T) {
					ctx := context.Background()
					// The source: the lunch email was delivered, its reply lost.
					srcMail := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
					src := memstore.New()
					lunchEnv := newEmailTool(t, srcMail, agenttool.Options{Store: src, Class: agenttool.AtMostOnce, Fence: fence}).Invoke(scoped(), lunch)
					mustStatus(t, lunchEnv, envelope.UnknownOutcome)

					// The target: the minutes email was not delivered, its
					// outcome unknown, then found not applied by an operator.
					m := &mailServer{script: func(n int) (bool, error) {
						if n == 1 {
							return false, errLostReply
						}
						return true, nil
					}}
					dst := open()
					tool := newEmailTool(t, m, agenttool.Options{Store: dst, Class: agenttool.AtMostOnce, Fence: fence})
					first := tool.Invoke(scoped(), minutes)
					mustStatus(t, first, envelope.UnknownOutcome)
					op, err := agenttool.NewOperator(dst, tool)
					if err != nil {
						t.Fatal(err)
					}
					if err := op.ResolveNotApplied(ctx, first.RequestRef, first.Attempts, "maria", "not in the provider's log"); err != nil {
						t.Fatal(err)
					}

					rep, err := storekit.Copy(ctx, src, dst, nil)
					if err != nil || rep.Copied != 1 || rep.Beside != 1 {
						t.Fatalf("copy: %+v, %v; want the lunch email copied beside its slot", rep, err)
					}
					if rec, err := dst.Get(ctx, lunchEnv.RequestRef); err != nil || rec.State != storekit.Unknown {
						t.Fatalf("the copied lunch email: %+v, %v; want it unknown", rec, err)
					}

					env := tool.Invoke(scoped(), next)
					t.Logf("after the copy: %s", env)
					if env.Error == nil || env.Error.Code != envelope.CodeEarlierUnknown {
						t.Errorf("a write of send_email in the scope while the copied lunch email %s is unknown: %s; want earlier_action_unknown", lunchEnv.RequestRef, env.Status)
					}
					if runs := m.runs.Load(); runs != 1 {
						t.Errorf("send_email ran %d times in the target while the copied lunch email is unknown; want 1 (the first minutes attempt)", runs)
					}
				})
			}
		}
	})
}

// A keyed tool's held call says that resending the earlier request's exact
// input settles the earlier action only where it does: where that resend
// meets the earlier action's reference, and the destination still keeps
// it.
//
// Under FencePrincipal, the lunch email of conversation 9 is unknown;
// conversation 10 sends Bob a report and is held, told "Calling
// send_email again with that earlier request's exact input settles it
// safely" (next: wait). Its model does so — the lunch email's exact input
// — but in conversation 10 that input has another reference: held again,
// nothing settled, the same note. And once the destination may have
// forgotten the key (DestinationKeyTTL), resending the exact input in
// conversation 9 does not settle it either: it answers that the action is
// too old to retry and a person must check it. Nor does it on a replica
// that builds the tool under another definition (a rolling deploy that
// narrows IdentifyingFields): the exact input has another reference
// there, and is held again.
func TestI9_AKeyedToolsHeldCallSaysResendingSettlesItOnlyWhereItDoes(t *testing.T) {
	t.Run("another conversation of the principal", func(t *testing.T) {
		m := firstLost()
		m.dedupe = true
		tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Fence: agenttool.FencePrincipal,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		held := tool.Invoke(otherSession(), bobReport)
		t.Logf("conversation 10, held: %s", held)
		if !strings.Contains(held.Note, "exact input settles it") {
			t.Skipf("the held call no longer says that resending settles it: %s", held)
		}
		resend := tool.Invoke(otherSession(), lunch) // as the note says
		t.Logf("conversation 10, the earlier request's exact input: %s", resend)
		if resend.Status != envelope.Success {
			t.Errorf("conversation 10 followed the note (resent the earlier request's exact input) and nothing was settled: %s; "+
				"the note said it would settle %s", resend, first.RequestRef)
		}
	})
	t.Run("a key the destination may have forgotten", func(t *testing.T) {
		clk := newClock()
		m := firstLost()
		m.dedupe = true
		tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Now: clk.Now,
			DestinationKeyTTL: time.Hour, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		clk.Advance(2 * time.Hour)
		held := tool.Invoke(scoped(), lunchReworded)
		t.Logf("held: %s", held)
		if !strings.Contains(held.Note, "exact input settles it") {
			t.Skipf("the held call no longer says that resending settles it: %s", held)
		}
		resend := tool.Invoke(scoped(), lunch)
		t.Logf("the earlier request's exact input: %s", resend)
		if resend.Status != envelope.Success {
			t.Errorf("the model followed the held call's note (resent the earlier request's exact input) and nothing was settled: %s", resend)
		}
	})
	t.Run("an action made under another definition", func(t *testing.T) {
		store := memstore.New()
		m := firstLost()
		m.dedupe = true
		old := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		first := old.Invoke(scoped(), lunch) // replica A, every field identifying
		mustStatus(t, first, envelope.UnknownOutcome)
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"to", "subject"},
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}}) // replica B, the new version
		held := tool.Invoke(scoped(), lunchReworded)
		t.Logf("replica B, held: %s", held)
		if !strings.Contains(held.Note, "exact input settles it") {
			t.Skipf("the held call no longer says that resending settles it: %s", held)
		}
		resend := tool.Invoke(scoped(), lunch)
		t.Logf("replica B, the earlier request's exact input: %s", resend)
		if resend.Status != envelope.Success {
			t.Errorf("the model followed the held call's note on replica B and nothing was settled: %s", resend)
		}
	})
}
