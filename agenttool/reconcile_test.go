package agenttool_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
		tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: mailboxReconciler(m, &checks)})
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
