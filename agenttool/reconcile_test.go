package agenttool_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"sync"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// mailboxReconciler searches the mail server's effects by reference, the
// way a real one searches a mailbox by Message-ID.
func mailboxReconciler(m *mailServer, checks *atomic.Int64) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		if checks != nil {
			checks.Add(1)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if slices.Contains(m.effects, ref) {
			return reconcile.AppliedWith([]byte(`{"message_id":"<` + ref + `@mail.test>"}`))
		}
		return reconcile.NotAppliedYet()
	})
}

func fixed(a reconcile.Answer) reconcile.Reconciler {
	return reconcile.Func(func(context.Context, string) reconcile.Answer { return a })
}

func TestReconcileAfterUnknownAttempt(t *testing.T) {
	t.Run("applied", func(t *testing.T) {
		m := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
		store := memstore.New()
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: mailboxReconciler(m, nil)})
		env := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, env, envelope.Success)
		if !env.Reconciled || env.Attempts != 1 || string(env.Result) != `{"message_id":"<`+env.RequestRef+`@mail.test>"}` {
			t.Errorf("envelope %s: want the destination's result, reconciled", env)
		}
		again := tool.Invoke(scoped(), emailToAna)
		if !again.Replayed || !again.Reconciled || m.runs.Load() != 1 || m.count() != 1 {
			t.Errorf("repeat: %s, runs %d", again, m.runs.Load())
		}
	})
	t.Run("not applied, then the same key again", func(t *testing.T) {
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return false, errLostReply // the request never arrived
			}
			return true, nil
		}}
		var checks atomic.Int64
		// One process, one clock, no attempt timeout: "not found" right
		// after the attempt returned proves it (nothing can still land).
		tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: mailboxReconciler(m, &checks),
			ClockSkew: -1})
		env := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, env, envelope.Success)
		if env.Attempts != 2 || env.Reconciled || m.count() != 1 || checks.Load() != 1 {
			t.Errorf("envelope %s, effects %d, checks %d", env, m.count(), checks.Load())
		}
	})
	for _, ans := range []reconcile.Answer{reconcile.StillPending(), reconcile.CantSayBecause(errors.New("mailbox search timed out"))} {
		t.Run(ans.Verdict.String(), func(t *testing.T) {
			m := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
			store := memstore.New()
			tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: fixed(ans)})
			env := tool.Invoke(scoped(), emailToAna)
			mustStatus(t, env, envelope.UnknownOutcome)
			if env.Next != envelope.DoNotRetry || env.Note == "" {
				t.Errorf("envelope %s: want do_not_retry with a note for the user", env)
			}
			rec, _ := store.Get(context.Background(), env.RequestRef)
			if rec.State != agenttool.Unknown {
				t.Errorf("record state %v, want unknown", rec.State)
			}
		})
	}
}

// A later call for an unknown key asks the destination first and runs the
// tool only after a not-applied verdict: in the same process and after a
// restart.
func TestUnknownKeyReconcilesBeforeAnyWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	lost := &mailServer{script: func(int) (bool, error) { return false, errLostReply }} // nothing arrived
	store := openBolt(t, path)
	pending := newEmailTool(t, lost, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: fixed(reconcile.StillPending())})
	first := pending.Invoke(scoped(), emailToAna)
	mustStatus(t, first, envelope.UnknownOutcome)

	// The model repeats the call, same input and key-irrelevant reordering,
	// while the destination still cannot say: nothing runs.
	for _, in := range []string{emailToAna, `{"body":"See you at noon.","subject":"Lunch","to":"ana@example.com"}`} {
		env := pending.Invoke(scoped(), in)
		mustStatus(t, env, envelope.UnknownOutcome)
	}
	if lost.runs.Load() != 1 {
		t.Fatalf("tool ran %d times before a verdict, want 1", lost.runs.Load())
	}
	store.Close()

	// After a restart the destination answers: not applied. Only now does
	// the tool run again, with the same key.
	store = openBolt(t, path)
	m := &mailServer{}
	var checks atomic.Int64
	// One process, one clock, no attempt timeout: the first attempt cannot
	// be in flight any more, and not applied is trusted at once.
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: mailboxReconciler(m, &checks), ClockSkew: -1})
	env := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, env, envelope.Success)
	if env.RequestRef != first.RequestRef || checks.Load() != 1 || m.count() != 1 || env.Attempts != 2 {
		t.Errorf("after restart: %s, checks %d, effects %d", env, checks.Load(), m.count())
	}
}

// A pending record whose holder died is reconciled, never blindly re-run.
func TestDeadHolderIsReconciled(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store, clk := open(), newClock()
		m := &mailServer{}
		ref := recordOfRef(t, emailToAna)
		holderOf(t, store, ref, clk.Now(), emailToAna)
		m.mu.Lock()
		m.effects = append(m.effects, ref) // the dead process's effect did happen
		m.mu.Unlock()
		clk.Advance(2 * time.Minute)
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Now: clk.Now, Reconciler: mailboxReconciler(m, nil)})
		env := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, env, envelope.Success)
		if !env.Reconciled || m.runs.Load() != 0 || m.count() != 1 {
			t.Errorf("envelope %s, runs %d, effects %d: want the dead holder's effect confirmed, not repeated", env, m.runs.Load(), m.count())
		}
	})
}

// A slow but live call renews its lease: another call waits or hears
// in_progress; it does not presume the holder dead. Time is synthetic
// (testing/synctest), so five leases pass without waiting for them.
func TestSlowCallKeepsItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{})
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				close(started)
				<-release
			}
			return true, nil
		}}
		var checks atomic.Int64
		opts := agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Lease: 30 * time.Second,
			KeyTTL: time.Hour, WaitTimeout: -1, Reconciler: mailboxReconciler(m, &checks)}
		tool := newEmailTool(t, m, opts)
		done := make(chan envelope.Envelope)
		go func() { done <- tool.Invoke(scoped(), emailToAna) }()
		<-started
		time.Sleep(150 * time.Second) // five leases
		busy := tool.Invoke(scoped(), emailToAna)
		if busy.Error == nil || busy.Error.Code != envelope.CodeInProgress {
			t.Errorf("during a slow live call: %s; want in_progress", busy)
		}
		close(release)
		mustStatus(t, <-done, envelope.Success)
		if m.runs.Load() != 1 || checks.Load() != 0 {
			t.Errorf("runs %d, checks %d: the live call was taken over", m.runs.Load(), checks.Load())
		}
	})
}

// A call waiting between attempts still holds its key: its lease is renewed
// through a backoff longer than the lease, and a second call hears
// in_progress instead of taking the key over.
func TestLeaseKeptBetweenAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return false, envelope.MarkTransient(errors.New("421 try again later"))
			}
			return true, nil
		}}
		opts := agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Lease: 30 * time.Second,
			KeyTTL: time.Hour, WaitTimeout: -1, Retry: agenttool.RetryPolicy{
				MaxAttempts: 2, InitialInterval: 100 * time.Second, MaxInterval: 100 * time.Second,
				RandomizationFactor: -1, MaxElapsed: 10 * time.Minute,
			}}
		tool := newEmailTool(t, m, opts)
		done := make(chan envelope.Envelope)
		go func() { done <- tool.Invoke(scoped(), emailToAna) }()
		time.Sleep(90 * time.Second) // three leases into the backoff
		busy := tool.Invoke(scoped(), emailToAna)
		if busy.Error == nil || busy.Error.Code != envelope.CodeInProgress {
			t.Errorf("during the backoff: %s; want in_progress", busy)
		}
		env := <-done
		mustStatus(t, env, envelope.Success)
		if m.runs.Load() != 2 || env.Attempts != 2 {
			t.Errorf("runs %d, attempts %d: want the holder's two attempts only", m.runs.Load(), env.Attempts)
		}
	})
}

// The model repeats the action after unknown_outcome with a key-irrelevant
// field changed: the call is refused and nothing is written.
func TestRepeatWithOtherWordingWritesNothing(t *testing.T) {
	store := memstore.New()
	m := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, IdentifyingFields: []string{"to", "subject"},
		Reconciler: fixed(reconcile.StillPending())})
	first := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, first, envelope.UnknownOutcome)
	before, _ := store.Get(context.Background(), first.RequestRef)
	again := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch","body":"Lunch at noon, see you there!"}`)
	mustStatus(t, again, envelope.DefiniteFailure)
	after, _ := store.Get(context.Background(), first.RequestRef)
	if again.Error.Code != envelope.CodeKeyReused || !recordsEqual(before, after) || m.runs.Load() != 1 {
		t.Errorf("reworded repeat: %s; record changed %v; runs %d", again, !recordsEqual(before, after), m.runs.Load())
	}
}

// A reconciler is told how many attempts were made and when the last one
// may have been sent, from the store (so also after a restart): "not
// found, and sent more than five minutes ago" can then be a verdict.
func TestReconcilerIsToldWhenTheLastAttemptWasSent(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store, clk := open(), newClock()
		sentAt := clk.Now()
		var asked []reconcile.Request
		patient := reconcile.RequestFunc(func(_ context.Context, req reconcile.Request) reconcile.Answer {
			asked = append(asked, req)
			if clk.Now().Sub(req.LastSent) > 5*time.Minute {
				return reconcile.NotAppliedYet()
			}
			return reconcile.StillPending()
		})
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return false, errLostReply // never delivered; nobody can tell yet
			}
			return true, nil
		}}
		opts := agenttool.Options{Store: store, Class: agenttool.Reconcilable, Now: clk.Now, Reconciler: patient,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
		mustStatus(t, newEmailTool(t, m, opts).Invoke(scoped(), emailToAna), envelope.UnknownOutcome)
		clk.Advance(time.Minute)
		// Another process (a new tool) asks a minute later: too soon.
		mustStatus(t, newEmailTool(t, m, opts).Invoke(scoped(), emailToAna), envelope.UnknownOutcome)
		clk.Advance(10 * time.Minute)
		env := newEmailTool(t, m, opts).Invoke(scoped(), emailToAna)
		mustStatus(t, env, envelope.Success)
		if m.count() != 1 || len(asked) != 3 {
			t.Fatalf("effects %d, checks %d", m.count(), len(asked))
		}
		for i, req := range asked {
			// Checks that found nothing do not move it: the action was sent
			// once, at sentAt.
			if req.Ref != env.RequestRef || req.Attempts != 1 || !req.LastSent.Equal(sentAt) {
				t.Errorf("check %d was told %+v; want the reference, 1 attempt, and the first attempt's time %v", i, req, sentAt)
			}
		}
	})
}

// A check that panics leaves the record free to settle: no keeper holds it
// after the check died.
//
// The fence takes an earlier unknown action over to ask the destination;
// the reconciler panics once (a bug in a status client; the application
// recovers it, as net/http does for a handler). The call's own flight is
// ended by its defers, but the earlier action's takeover (holding) has no
// defer: its keeper renews the lease forever. The record stays pending,
// "being verified right now": neither an operator nor the fence can ever
// settle it, although the operator knows it was delivered.
func TestReconcile_PanickingCheckDoesNotHoldTheRecord(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply
			}
			return true, nil
		}}
		var armed, panicked atomic.Bool
		check := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
			if armed.Load() && panicked.CompareAndSwap(false, true) {
				var index map[string]*struct{ found bool }
				_ = index[ref].found // nil pointer dereference in the status client
			}
			return reconcile.StillPending()
		})
		lease := 90 * time.Millisecond
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check,
			Lease: lease, Retry: agenttool.RetryPolicy{MaxAttempts: 1, MaxElapsed: time.Second}})
		a := tool.Invoke(scoped(), lunch)
		mustStatus(t, a, envelope.UnknownOutcome)

		armed.Store(true)
		func() { // the application's handler recovers a panic, as net/http does
			defer func() { recover() }()
			tool.Invoke(scoped(), lunchReworded)
		}()
		if !panicked.Load() {
			t.Fatal("test setup: the check did not run")
		}
		// A bounded wait for what must not happen: the dead check's keeper
		// renewing the record's lease long after the check died.
		time.Sleep(10 * lease)

		op, _ := agenttool.NewOperator(store, tool)
		err := op.ResolveApplied(context.Background(), a.RequestRef, a.Attempts, []byte(`{"message_id":"<a@mail.test>"}`), "maria", "found in the provider's log")
		rec, _ := store.Get(context.Background(), a.RequestRef)
		t.Logf("operator: %v; record %v taken over %v, lease ends in %v", err, rec.State, rec.TakenOver, time.Until(rec.LeaseExpiry))
		if errors.Is(err, agenttool.ErrBusy) {
			t.Fatalf("%d leases after the check died, the record is still held (pending, renewed): the operator cannot settle it", 10)
		}
	})
}

// A check that never answers is bounded by CheckTimeout: the operator can
// settle the record, the fence lets the scope go, and the sweeper goes on.
//
// The mailbox's search API accepts the connection and never answers (no
// HTTP timeout in the status client). The check honours its context, but
// a sweeper's context lives as long as the sweeper: nothing bounds a check,
// and the holding's keeper renews the lease for as long as it waits. The
// record was "held by a live call" for ever: the operator, who found the
// email in the provider's log, could not settle it (ErrBusy), the unknown
// fence held the session, and the sweeper's pass never ended, so no other
// record was checked again. Now CheckTimeout bounds every check, the
// sweeper rests a record between checks, and the operator waits for a
// check in progress to end.
func TestReconcile_HangingCheckIsBounded(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) { hangingCheck(t, open()) })
}

func hangingCheck(t *testing.T, store agenttool.Store) {
	m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }} // every reply is lost
	var hang atomic.Bool
	var checks atomic.Int64
	checked := make(chan struct{}, 1) // a check began
	hanging := make(chan struct{})    // a check hangs
	var hangs sync.Once
	check := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		checks.Add(1)
		select {
		case checked <- struct{}{}:
		default:
		}
		if hang.Load() {
			hangs.Do(func() { close(hanging) })
			<-ctx.Done() // the search API never answers; the check honours ctx
			return reconcile.CantSayBecause(ctx.Err())
		}
		return reconcile.StillPending()
	})
	lease := 200 * time.Millisecond // renewals and checks of a loaded two-core machine keep up with it
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check,
		Lease: lease, CheckTimeout: 2 * lease, Retry: agenttool.RetryPolicy{MaxAttempts: 1, MaxElapsed: time.Second}})
	a := tool.Invoke(scoped(), lunch)
	mustStatus(t, a, envelope.UnknownOutcome)

	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	hang.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	passes := make(chan error, 1)
	go func() { passes <- op.RunSweeper(ctx, agenttool.SweeperOptions{Interval: 10 * time.Millisecond}) }()
	<-hanging // the sweeper's check of A never answers

	err = op.ResolveApplied(context.Background(), a.RequestRef, a.Attempts, []byte(`{"message_id":"<a@mail.test>"}`), "maria", "found in the provider's log")
	rec, _ := store.Get(context.Background(), a.RequestRef)
	if errors.Is(err, agenttool.ErrBusy) {
		t.Errorf("while a check that never answers runs, the operator cannot settle the record: %v (record %v, taken over %v, checks %d)",
			err, rec.State, rec.TakenOver, checks.Load())
	}
	// The session is fenced meanwhile.
	hang.Store(false)
	env := tool.Invoke(scoped(), lunchReworded)
	if env.Error != nil && env.Error.Code == envelope.CodeEarlierUnknown {
		t.Errorf("a new action is held back by the hanging check: %s", env)
	}
	// And the sweeper never starts another pass: a second unknown action is
	// never checked.
	other := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-1/user-1", "c-1"), lunch)
	mustStatus(t, other, envelope.UnknownOutcome)
	before := checks.Load()
	select { // forget the checks made so far
	case <-checked:
	default:
	}
	deadline := time.After(20 * lease) // the sweeper checks the other action within it
wait:
	for checks.Load() == before {
		select {
		case <-checked:
		case <-deadline:
			break wait
		}
	}
	if checks.Load() == before {
		t.Errorf("the sweeper checked nothing in 20 leases (its pass is stuck in the hanging check)")
	}
}

// A check that ignores its context or panics counts as can't say: the call
// answers unknown_outcome within CheckTimeout.
//
// A reconciler that ignores its context, or panics, cannot hold a call:
// after CheckTimeout the check counts as "can't say" and the outcome stays
// unknown; a panic is a "can't say" too, not a crash.
func TestReconcile_StubbornOrPanickingCheckIsCantSay(t *testing.T) {
	block := make(chan struct{})
	defer close(block) // lets the abandoned check end
	for name, check := range map[string]reconcile.Func{
		"ignores its context": func(ctx context.Context, ref string) reconcile.Answer {
			<-block
			return reconcile.AppliedWith(nil)
		},
		"panics": func(ctx context.Context, ref string) reconcile.Answer { panic("index out of range") },
	} {
		t.Run(name, func(t *testing.T) {
			m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
			tool := newEmailTool(t, m, agenttool.Options{Store: openBolt(t, t.TempDir()+"/keys.db"), Class: agenttool.Reconcilable,
				Reconciler: check, CheckTimeout: 50 * time.Millisecond, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
			done := make(chan envelope.Envelope, 1)
			go func() { done <- tool.Invoke(scoped(), lunch) }()
			select {
			case env := <-done:
				mustStatus(t, env, envelope.UnknownOutcome)
				if env.Next != envelope.DoNotRetry || m.count() != 1 {
					t.Errorf("envelope %s after %d emails", env, m.count())
				}
				t.Log(env.Error.Message)
			case <-time.After(30 * time.Second):
				t.Fatal("the call is still waiting for its check")
			}
		})
	}
}

// laggingMailbox is a destination whose index shows a delivered message
// only five minutes after it arrived (the README's "mailbox index is still
// catching up"), on the test's clock.
type laggingMailbox struct {
	mu        sync.Mutex
	clk       *clock
	delivered []time.Time // arrival times, one per effect
}

func (b *laggingMailbox) deliver() {
	b.mu.Lock()
	b.delivered = append(b.delivered, b.clk.Now())
	b.mu.Unlock()
}

func (b *laggingMailbox) visible() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, at := range b.delivered {
		if b.clk.Now().Sub(at) >= 5*time.Minute {
			return true
		}
	}
	return false
}

func (b *laggingMailbox) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.delivered)
}

// The reconciler of reconcile_test.go: "not found, and sent more than five
// minutes ago" is a NotApplied, as reconcile.Request.LastSent documents.
func patientReconciler(clk *clock, box *laggingMailbox) reconcile.Reconciler {
	return reconcile.RequestFunc(func(_ context.Context, req reconcile.Request) reconcile.Answer {
		if box.visible() {
			return reconcile.AppliedWith([]byte(`{"ok":true}`))
		}
		if !req.LastSent.IsZero() && clk.Now().Sub(req.LastSent) > 5*time.Minute {
			return reconcile.NotAppliedYet()
		}
		return reconcile.StillPending()
	})
}

// The reconciler is never told a request went out earlier than it could
// have: a slow attempt is not presumed lost.
//
// An attempt that takes ten minutes (a slow upload) sends its request at
// its end, not its start. LastSent is the attempt's start, so the reconciler
// is told the request went out ten minutes ago, answers "not applied", and
// the same email is sent a second time.
func TestReconcile_LastSentCoversASlowAttempt(t *testing.T) {
	clk := newClock()
	box := &laggingMailbox{clk: clk}
	var mu sync.Mutex
	runs := 0
	send := func(ctx context.Context, in emailInput) (sent, error) {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		if n == 1 {
			clk.Advance(10 * time.Minute) // the upload is slow
			box.deliver()                 // the request arrives at the end
			return sent{}, errLostReply   // and the reply is lost
		}
		box.deliver()
		return sent{MessageID: "<x@mail.test>"}, nil
	}
	tool, err := agenttool.New("send_email", "Send an email.", send, agenttool.Options{
		Store: memstore.New(), Class: agenttool.Reconcilable, Now: clk.Now,
		Reconciler: patientReconciler(clk, box),
		Retry:      agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), emailToAna)
	if box.count() != 1 {
		t.Fatalf("one logical action, %d emails delivered; envelope %s", box.count(), env)
	}
	if env.Status != envelope.UnknownOutcome {
		t.Errorf("envelope %s", env)
	}
}

// The same across processes: the last-sent time a record keeps covers a slow
// attempt.
//
// The same, across processes: the unknown record keeps the attempt's start
// as its LeaseExpiry, and the call that meets it tells the reconciler so.
func TestReconcile_StoredLastSentCoversASlowAttempt(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) { storedLastSent(t, open()) })
}

func storedLastSent(t *testing.T, store agenttool.Store) {
	clk := newClock()
	box := &laggingMailbox{clk: clk}
	var mu sync.Mutex
	runs := 0
	send := func(ctx context.Context, in emailInput) (sent, error) {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		if n == 1 {
			clk.Advance(10 * time.Minute)
			box.deliver()
			return sent{}, errLostReply
		}
		box.deliver()
		return sent{MessageID: "<x@mail.test>"}, nil
	}
	var down sync.Mutex
	mailboxDown := true // the mailbox's search API is down at first
	patient := patientReconciler(clk, box)
	check := reconcile.RequestFunc(func(ctx context.Context, req reconcile.Request) reconcile.Answer {
		down.Lock()
		d := mailboxDown
		down.Unlock()
		if d {
			return reconcile.CantSayBecause(errLostReply)
		}
		return patient.Check(ctx, req)
	})
	opts := agenttool.Options{Store: store, Class: agenttool.Reconcilable, Now: clk.Now, Reconciler: check,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
	tool, err := agenttool.New("send_email", "Send an email.", send, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, tool.Invoke(scoped(), emailToAna), envelope.UnknownOutcome)
	// One minute after the request arrived (eleven after the attempt began),
	// the search API is back and the model repeats itself.
	clk.Advance(time.Minute)
	down.Lock()
	mailboxDown = false
	down.Unlock()
	env := tool.Invoke(scoped(), emailToAna)
	if box.count() != 1 {
		t.Fatalf("one logical action, %d emails delivered; envelope %s", box.count(), env)
	}
}

// A call does not send again, nor answer "not applied", while its own
// ambiguous attempt may still be in flight: a not-applied answer that is
// not fenced counts as pending until that attempt can no longer land
// (reconcile.Answer.Fenced), for the holder's own check as for a takeover.
//
// The mail server accepts attempt 1, the connection drops before its reply
// (unknown), and the message is delivered a moment later, well within
// AttemptTimeout. The call's check right after the attempt searches the
// mailbox, does not find the message yet (not applied, not fenced), and
// trusts it at once: with retries left the call sends attempt 2 (two
// emails, answered success); with none it gives the key back and answers
// definite_failure "Nothing was done", and the resend sends a second
// email. A resend that took the same record over at that moment would
// have counted the answer as pending until the attempt's end plus
// AttemptTimeout plus ClockSkew
// (TestTakeoverTrustsNotAppliedOnlyAfterTheHolderCannotBeInFlight).
func TestReconcile_OwnAttemptInFlightIsNotSentAgain(t *testing.T) {
	for _, attempts := range []int{3, 1} {
		t.Run(fmt.Sprintf("max %d attempts", attempts), func(t *testing.T) {
			m := &mailServer{}
			land, landed := make(chan struct{}), make(chan struct{})
			var runs atomic.Int64
			retry := fastRetry
			retry.MaxAttempts = attempts
			opts := agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, AttemptTimeout: time.Second,
				Retry: retry, Reconciler: mailboxReconciler(m, nil)}
			tool, err := agenttool.New("send_email", "", func(ctx context.Context, in emailInput) (sent, error) {
				if runs.Add(1) == 1 {
					ref := agenttool.RequestRef(ctx)
					go func() { // accepted: delivered once the server's queue gets to it
						defer close(landed)
						<-land
						m.mu.Lock()
						m.effects = append(m.effects, ref)
						m.mu.Unlock()
					}()
					return sent{}, errLostReply
				}
				return m.send(ctx, in)
			}, opts)
			if err != nil {
				t.Fatal(err)
			}
			env := tool.Invoke(scoped(), emailToAna)
			close(land) // attempt 1 lands, well within AttemptTimeout of its start
			<-landed
			t.Logf("call:   %s", env)
			if env.Status == envelope.DefiniteFailure {
				t.Errorf("the call answered definite_failure (%s), and its first attempt was delivered", env.Error.Code)
			}
			resend := tool.Invoke(scoped(), emailToAna)
			t.Logf("resend: %s", resend)
			if n := m.count(); n != 1 {
				t.Errorf("one action, %d emails (%d attempts sent); the call answered %s, its resend %s", n, runs.Load(), env.Status, resend.Status)
			}
		})
	}
}

// A destination reads what it answers some time after it is asked: a
// check asked while an attempt may still land says nothing of what landed
// after it read, however late its answer comes. The mailbox is searched
// the moment the check is asked (not found); the check answers only once
// the attempt's in-flight window has passed on the call's clock, and the
// attempt landed meanwhile. Its "not applied" counts as pending: no second
// email, from the call's own retries or from the model's resend.
func TestReconcile_ANotFoundAskedWhileTheAttemptMayLandProvesNothingHoweverLateItComes(t *testing.T) {
	m := &mailServer{}
	clk := newClock()
	var runs atomic.Int64
	var ref string
	opts := agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, AttemptTimeout: time.Second, Now: clk.Now,
		Retry: fastRetry, Reconciler: reconcile.Func(func(ctx context.Context, r string) reconcile.Answer {
			m.mu.Lock()
			found := slices.Contains(m.effects, r)
			m.mu.Unlock()
			if runs.Load() == 1 && !found {
				// The search read nothing; by the time it answers, the
				// attempt can no longer land — and it landed.
				clk.Advance(time.Minute)
				m.mu.Lock()
				m.effects = append(m.effects, ref)
				m.mu.Unlock()
			}
			if found {
				return reconcile.AppliedWith([]byte(`{"message_id":"<` + r + `@mail.test>"}`))
			}
			return reconcile.NotAppliedYet()
		})}
	tool, err := agenttool.New("send_email", "", func(ctx context.Context, in emailInput) (sent, error) {
		if runs.Add(1) == 1 {
			ref = agenttool.RequestRef(ctx)
			return sent{}, errLostReply // accepted; delivered while the check runs
		}
		return m.send(ctx, in)
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), emailToAna)
	t.Logf("call:   %s", env)
	resend := tool.Invoke(scoped(), emailToAna)
	t.Logf("resend: %s", resend)
	if n := m.count(); n != 1 {
		t.Errorf("one action, %d emails (%d attempts sent); the call answered %s, its resend %s", n, runs.Load(), env.Status, resend.Status)
	}
	if env.Status == envelope.DefiniteFailure || (env.Status == envelope.Success && runs.Load() > 1) {
		t.Errorf("the call answered %s after %d attempts, and its first was delivered", env.Status, runs.Load())
	}
}
