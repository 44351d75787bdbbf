package agenttool_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// wire is a destination whose requests can be held "on the wire": it
// applies a request only when it arrives, and its status check, asked
// before that, truthfully finds nothing.
type wire struct {
	mu      sync.Mutex
	effects map[string]int
}

func (w *wire) apply(ref string) { w.mu.Lock(); w.effects[ref]++; w.mu.Unlock() }

func (w *wire) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	ref := req.Ref
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.effects[ref] > 0 {
		return reconcile.AppliedWith([]byte(`{"found":true}`))
	}
	return reconcile.NotAppliedYet()
}

// stalled is two processes of one tool on one store, with the first's
// request of lunch on the wire and the process stalled (until land is
// closed); done carries its answer then.
type stalled struct {
	store *memstore.Store
	clock *clock
	wire  *wire
	proc2 *agenttool.Tool
	land  chan struct{}
	done  chan envelope.Envelope
}

func stallHolder(t *testing.T) stalled {
	t.Helper()
	st := stalled{store: memstore.New(), clock: newClock(), wire: &wire{effects: map[string]int{}},
		land: make(chan struct{}), done: make(chan envelope.Envelope)}
	started := make(chan struct{})
	var once sync.Once
	send := func(ctx context.Context, in emailInput) (sent, error) {
		ref := agenttool.RequestRef(ctx)
		first := false
		once.Do(func() { first = true })
		if first { // process 1: the request leaves, the process stalls
			close(started)
			<-st.land
		}
		st.wire.apply(ref)
		return sent{MessageID: ref}, nil
	}
	opts := agenttool.Options{Store: st.store, Class: agenttool.Reconcilable, Reconciler: st.wire, Now: st.clock.Now,
		AttemptTimeout: 10 * time.Second, ClockSkew: time.Second, Lease: time.Minute, Retry: fastRetry}
	proc1, err := agenttool.New("send_email", "Send.", send, opts)
	if err != nil {
		t.Fatal(err)
	}
	if st.proc2, err = agenttool.New("send_email", "Send.", send, opts); err != nil {
		t.Fatal(err)
	}
	go func() { st.done <- proc1.Invoke(scoped(), lunch) }()
	<-started
	return st
}

// A takeover trusts not applied only after the in-flight grace, also after
// an earlier takeover left the record unknown.
//
// Scenario: the takeover grace (a not-applied answer counts as pending until
// the lapsed lease's end + AttemptTimeout + ClockSkew) is lost after the
// first takeover settles the record as still unknown: Finish zeroes
// LeaseExpiry, so the next takeover sees HeldUntil zero and trusts
// NotApplied inside the window, while the stalled holder's request is
// still on the wire.
func TestTakeover_GraceSurvivesAPendingCheck(t *testing.T) {
	st := stallHolder(t)
	c, w, proc2, land, done := st.clock, st.wire, st.proc2, st.land, st.done
	// Process 1 stalls past its lease (it ends at +60s). Grace: until +71s.
	c.Advance(61 * time.Second)
	first := proc2.Invoke(scoped(), lunch)
	t.Logf("+61s, process 2: %s", first) // unknown_outcome: the grace works once
	c.Advance(time.Second)
	second := proc2.Invoke(scoped(), lunch) // +62s: still inside the grace window
	t.Logf("+62s, process 2: %s", second)
	close(land) // process 1's request arrives
	t.Logf("process 1: %s", <-done)
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.effects[first.RequestRef]; n > 1 {
		t.Fatalf("one action applied %d times: NotApplied was trusted at +62s, inside the grace window that ends at +71s", n)
	}
}

// The in-flight grace also survives a sweep that left the record unknown.
//
// Scenario: the takeover grace (a not-applied answer counts as pending until
// the lapsed lease's end + AttemptTimeout + ClockSkew) is lost after the
// first takeover settles the record as still unknown: Finish zeroes
// LeaseExpiry, so the next takeover sees HeldUntil zero and trusts
// NotApplied inside the window, while the stalled holder's request is
// still on the wire.
func TestTakeover_GraceSurvivesASweep(t *testing.T) {
	st := stallHolder(t)
	store, c, w, proc2, land, done := st.store, st.clock, st.wire, st.proc2, st.land, st.done
	// Process 1 stalls past its lease (it ends at +60s). Grace: until +71s.
	c.Advance(61 * time.Second)
	op, _ := agenttool.NewOperator(store, proc2)
	rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
	t.Logf("+61s, sweeper: %+v %v", rep, err) // Unknown: 1, the grace works once

	c.Advance(time.Second)
	second := proc2.Invoke(scoped(), lunch) // +62s: still inside the grace window
	t.Logf("+62s, process 2: %s", second)
	close(land) // process 1's request arrives
	t.Logf("process 1: %s", <-done)
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.effects[second.RequestRef]; n > 1 {
		t.Fatalf("one action applied %d times: NotApplied was trusted at +62s, inside the grace window that ends at +71s", n)
	}
}

// The in-flight grace also survives a restart of the store.
//
// The takeover grace (not applied counts as pending until the lapsed
// lease's end + AttemptTimeout + ClockSkew, "until then the first request
// may still be in flight") is dropped by a boltstore restart: Open ends
// the dead holder's lease (HeldUntil zero), so the restarted process trusts
// "not applied" at once, while the request the dead process sent is still
// on the wire. It lands: two emails.
func TestTakeover_GraceSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	w := &wire{effects: map[string]int{}}
	started, land := make(chan struct{}), make(chan struct{})
	landed := make(chan struct{})
	first := true
	send := func(ctx context.Context, in emailInput) (sent, error) {
		ref := agenttool.RequestRef(ctx)
		if first { // process 1: the request is sent, then the process dies
			first = false
			close(started)
			<-land
			w.apply(ref) // the request sent before the crash reaches the destination
			close(landed)
			return sent{}, errLostReply
		}
		w.apply(ref)
		return sent{MessageID: ref}, nil
	}
	opts := func(s agenttool.Store) agenttool.Options {
		return agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: w,
			AttemptTimeout: 10 * time.Second, ClockSkew: time.Second, Lease: time.Minute, Retry: fastRetry}
	}
	s1, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	proc1, err := agenttool.New("send_email", "Send.", send, opts(s1))
	if err != nil {
		t.Fatal(err)
	}
	go proc1.Invoke(scoped(), lunch)
	<-started
	s1.Close() // process 1 is killed with its request on the wire

	s2 := openBolt(t, path) // process 2, a moment later
	proc2, err := agenttool.New("send_email", "Send.", send, opts(s2))
	if err != nil {
		t.Fatal(err)
	}
	env := proc2.Invoke(scoped(), lunch) // the model repeats itself
	t.Logf("after the restart: %s", env)
	close(land)
	<-landed
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.effects[env.RequestRef]; n > 1 {
		t.Fatalf("one action applied %d times: not applied was trusted inside the in-flight grace, which a restart dropped (envelope %s)", n, env.Status)
	}
}
