package agenttool_test

// Replicas whose clocks disagree by no more than Options.ClockSkew, or
// whose clock steps by as much mid-call: every rule that compares a time
// one replica wrote with another's clock allows for it.

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// skewedClock is a shared manual clock seen by a replica with an offset.
type skewedClock struct {
	base *clock
	mu   sync.Mutex
	off  time.Duration
}

func (c *skewedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Now().Add(c.off)
}

func (c *skewedClock) step(d time.Duration) { c.mu.Lock(); c.off += d; c.mu.Unlock() }

// skewStores runs fn on pgstore and on one bbolt file shared by the replicas.
func skewStores(t *testing.T, fn func(t *testing.T, store agenttool.Store)) {
	t.Run("pgstore", func(t *testing.T) { fn(t, pgtest.Open(t)) })
	t.Run("boltstore", func(t *testing.T) { fn(t, openBolt(t, filepath.Join(t.TempDir(), "keys.db"))) })
}

// skewDest counts effects per ref; Check reports truthfully.
type skewDest struct {
	mu      sync.Mutex
	effects map[string]int
}

func (d *skewDest) apply(ref string) { d.mu.Lock(); d.effects[ref]++; d.mu.Unlock() }
func (d *skewDest) n(ref string) int { d.mu.Lock(); defer d.mu.Unlock(); return d.effects[ref] }
func (d *skewDest) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	if d.n(req.Ref) > 0 {
		return reconcile.AppliedWith([]byte(`{"found":true}`))
	}
	return reconcile.NotAppliedYet()
}

// skewStalled: replica A's first attempt leaves and the process stalls
// (GC/SIGSTOP-like) until land is closed; replica B's clock is off by
// offB from A's.
func skewStalled(t *testing.T, store agenttool.Store, offB time.Duration) (base *clock, a, b *skewedClock, dest *skewDest, procB *agenttool.Tool, land chan struct{}, done chan envelope.Envelope) {
	base = newClock()
	a, b = &skewedClock{base: base}, &skewedClock{base: base, off: offB}
	dest = &skewDest{effects: map[string]int{}}
	land, done = make(chan struct{}), make(chan envelope.Envelope, 1)
	started := make(chan struct{})
	var once sync.Once
	send := func(ctx context.Context, in emailInput) (sent, error) {
		ref := agenttool.RequestRef(ctx)
		first := false
		once.Do(func() { first = true })
		if first {
			close(started)
			<-land
		}
		dest.apply(ref)
		return sent{MessageID: ref}, nil
	}
	mk := func(c *skewedClock) *agenttool.Tool {
		tool, err := agenttool.New("send_email", "Send.", send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
			Reconciler: dest, Now: c.Now, AttemptTimeout: 10 * time.Second, ClockSkew: time.Second, Lease: time.Minute, Retry: fastRetry})
		if err != nil {
			t.Fatal(err)
		}
		return tool
	}
	procA := mk(a)
	procB = mk(b)
	go func() { done <- procA.Invoke(scoped(), lunch) }()
	<-started
	return
}

// Replica B's clock is ClockSkew ahead of A's. A stalls with its request
// on the wire; B takes the action over as soon as its clock says the lease
// lapsed, and keeps calling. A's request lands just before A's lease end +
// AttemptTimeout (A's clock, i.e. real time). No second effect; no
// success before the first lands.
func TestClockSkew_SkewedReplicaTakeoverWaitsOutInFlight(t *testing.T) {
	for _, off := range []time.Duration{time.Second, -time.Second} {
		t.Run(fmt.Sprint("B off ", off), func(t *testing.T) {
			skewStores(t, func(t *testing.T, store agenttool.Store) {
				base, _, _, dest, procB, land, done := skewStalled(t, store, off)
				// A's lease ends at +60s on A's clock. B (ahead) sees it lapse at A+59s.
				base.Advance(59*time.Second + 100*time.Millisecond)
				var ref string
				for _, step := range []time.Duration{0, 2 * time.Second, 3 * time.Second, 3 * time.Second, 2*time.Second + 700*time.Millisecond} {
					base.Advance(step)
					env := procB.Invoke(scoped(), lunch)
					ref = env.RequestRef
					t.Logf("A-time +%v, B: %s", base.Now().Sub(newClock().Now()), env)
					if env.Status == envelope.Success || dest.n(ref) > 0 {
						t.Fatalf("B answered %s / ran the effect (%d) while A's request may still land", env.Status, dest.n(ref))
					}
				}
				close(land)
				t.Logf("A: %s", <-done)
				base.Advance(2 * time.Second)
				env := procB.Invoke(scoped(), lunch)
				t.Logf("after: B: %s", env)
				if n := dest.n(ref); n != 1 {
					t.Fatalf("one action applied %d times", n)
				}
			})
		})
	}
}

// The sweeper runs on replica B, whose clock is ClockSkew ahead: it must
// not trust not-applied before A's request can no longer land, and a
// retry on B after the sweep must not send a second copy.
func TestClockSkew_SkewedSweeperTakeover(t *testing.T) {
	skewStores(t, func(t *testing.T, store agenttool.Store) {
		base, _, _, dest, procB, land, done := skewStalled(t, store, time.Second)
		op, err := agenttool.NewOperator(store, procB)
		if err != nil {
			t.Fatal(err)
		}
		base.Advance(59*time.Second + 100*time.Millisecond)
		for i := 0; i < 6; i++ {
			rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
			t.Logf("A-time +%v sweep: %+v %v", base.Now().Sub(newClock().Now()), rep, err)
			base.Advance(1800 * time.Millisecond)
		}
		// A-time now ~ +69.9s: A's request lands.
		env := procB.Invoke(scoped(), lunch)
		t.Logf("B before landing: %s", env)
		if env.Status == envelope.Success || dest.n(env.RequestRef) > 0 {
			t.Fatalf("B ran the action while A's request may still land: %s", env)
		}
		close(land)
		t.Logf("A: %s", <-done)
		base.Advance(2 * time.Second)
		if _, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{}); err != nil {
			t.Log(err)
		}
		env = procB.Invoke(scoped(), lunch)
		t.Logf("B after: %s", env)
		if n := dest.n(env.RequestRef); n != 1 {
			t.Fatalf("one action applied %d times", n)
		}
	})
}

// Replica A's clock steps back by ClockSkew (NTP) while its attempt runs;
// the attempt's reply is lost after the request left. Replica B (clock
// ClockSkew ahead of A's stepped clock, as before the step) retries; the
// late request lands AttemptTimeout after it was sent.
func TestClockSkew_NTPStepBackDuringAttempt(t *testing.T) {
	skewStores(t, func(t *testing.T, store agenttool.Store) {
		base := newClock()
		a, b := &skewedClock{base: base}, &skewedClock{base: base, off: 0}
		dest := &skewDest{effects: map[string]int{}}
		land := make(chan string, 1)
		var once sync.Once
		send := func(ctx context.Context, in emailInput) (sent, error) {
			ref := agenttool.RequestRef(ctx)
			first := false
			once.Do(func() { first = true })
			if first {
				// The request left at A-time 0; A's clock now steps back by 1s,
				// and 9.9s of real time pass before the attempt gives up.
				a.step(-time.Second)
				base.Advance(9900 * time.Millisecond)
				land <- ref // lands later
				return sent{}, errLostReply
			}
			dest.apply(ref)
			return sent{MessageID: ref}, nil
		}
		mk := func(c *skewedClock) *agenttool.Tool {
			tool, err := agenttool.New("send_email", "Send.", send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
				Reconciler: dest, Now: c.Now, AttemptTimeout: 10 * time.Second, ClockSkew: time.Second, Lease: time.Minute,
				Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
			if err != nil {
				t.Fatal(err)
			}
			return tool
		}
		procA, procB := mk(a), mk(b)
		envA := procA.Invoke(scoped(), lunch)
		t.Logf("A: %s", envA)
		ref := <-land
		// B calls again at once and keeps calling until the request lands.
		for i := 0; i < 5; i++ {
			env := procB.Invoke(scoped(), lunch)
			t.Logf("real +%v B: %s", base.Now().Sub(newClock().Now()), env)
			if env.Status == envelope.Success && dest.n(ref) > 0 {
				t.Fatalf("B sent again while A's request may still land")
			}
			base.Advance(2 * time.Second)
		}
		dest.apply(ref) // A's late request lands (sent at real 0 + at most 10s + ... it's later: generous)
		env := procB.Invoke(scoped(), lunch)
		t.Logf("B after: %s", env)
		if n := dest.n(ref); n != 1 {
			t.Fatalf("one action applied %d times", n)
		}
	})
}

// skewMail is an email destination: every send delivers (one email per
// send); the first send's reply is lost. Check answers pending while
// hide is set, else the truth by reference.
type skewMail struct {
	mu     sync.Mutex
	emails []string
	sends  int
	hide   bool
}

func (m *skewMail) send(ctx context.Context, in emailInput) (sent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sends++
	m.emails = append(m.emails, agenttool.RequestRef(ctx))
	if m.sends == 1 {
		return sent{}, errLostReply
	}
	return sent{MessageID: agenttool.RequestRef(ctx)}, nil
}

func (m *skewMail) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hide {
		return reconcile.Answer{Verdict: reconcile.Pending}
	}
	for _, e := range m.emails {
		if e == req.Ref {
			return reconcile.AppliedWith([]byte(`{"found":true}`))
		}
	}
	return reconcile.NotAppliedYet()
}

func (m *skewMail) count() int { m.mu.Lock(); defer m.mu.Unlock(); return len(m.emails) }

const skewLunchReworded = `{"to":"ana@example.com","subject":"Friday lunch?","body":"Ana, lunch at noon on Friday?"}`

// The unknown fence's notice across replicas: A's email's reply is lost
// (unknown). The model rewords it; the copy reaches B, whose fence finds
// the first applied and answers earlier_action_applied — the model is
// told, and for NoticeHold (10s) its other copies of the same turn must be
// held back. A second reworded copy of the same turn reaches C, whose
// clock is ClockSkew (1s) ahead, 9.5s after B told (real time).
//
// Control (offsets 0): C is held back. With C ahead of B by ClockSkew
// (whichever is off true time), C's copy runs: a second email.
func TestClockSkew_NoticeHoldAcrossSkewedReplicas(t *testing.T) {
	for _, o := range []struct{ b, c time.Duration }{{0, 0}, {0, time.Second}, {-500 * time.Millisecond, 500 * time.Millisecond}} {
		t.Run(fmt.Sprintf("B%+v C%+v", o.b, o.c), func(t *testing.T) { skewNoticeHold(t, o.b, o.c) })
	}
}

func skewNoticeHold(t *testing.T, offB, offC time.Duration) {
	skewStores(t, func(t *testing.T, store agenttool.Store) {
		base := newClock()
		m := &skewMail{hide: true}
		mk := func(off time.Duration) *agenttool.Tool {
			c := &skewedClock{base: base, off: off}
			tool, err := agenttool.New("send_email", "Send.", m.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
				Reconciler: m, Now: c.Now, AttemptTimeout: 10 * time.Second, ClockSkew: time.Second, Lease: time.Minute,
				Retry: fastRetry, NoticeHold: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return tool
		}
		a, b, c := mk(0), mk(offB), mk(offC)
		envA := a.Invoke(scoped(), lunch)
		t.Logf("A: %s", envA)
		mustStatus(t, envA, envelope.UnknownOutcome)
		m.mu.Lock()
		m.hide = false
		m.mu.Unlock()
		base.Advance(30 * time.Second) // well past the in-flight window
		envB := b.Invoke(scoped(), lunchRephrased)
		t.Logf("B: %s", envB)
		base.Advance(9500 * time.Millisecond)
		envC := c.Invoke(scoped(), skewLunchReworded)
		t.Logf("C (+9.5s real): %s", envC)
		if n := m.count(); n != 1 {
			t.Fatalf("one logical action (an email to Ana about lunch) sent %d times: C's reworded copy of the same turn ran %.1fs after the model was told, inside NoticeHold (10s), because C's clock is ClockSkew ahead", n, 9.5)
		}
	})
}

// As above, but the first email is settled applied by a sweeper (which
// tells nobody: the notice waits, up to NoticeBackstop); then a reworded
// copy on B is held back and told (storekit's tell shortens the notice to
// B's now + NoticeHold); a second copy of the same turn reaches C, whose
// clock is ClockSkew ahead, 9.5s later.
func TestClockSkew_NoticeHoldAfterSweepAcrossSkewedReplicas(t *testing.T) {
	skewStores(t, func(t *testing.T, store agenttool.Store) {
		base := newClock()
		m := &skewMail{hide: true}
		mk := func(off time.Duration) *agenttool.Tool {
			c := &skewedClock{base: base, off: off}
			tool, err := agenttool.New("send_email", "Send.", m.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
				Reconciler: m, Now: c.Now, AttemptTimeout: 10 * time.Second, ClockSkew: time.Second, Lease: time.Minute,
				Retry: fastRetry, NoticeHold: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return tool
		}
		a, b, c := mk(0), mk(0), mk(time.Second)
		mustStatus(t, a.Invoke(scoped(), lunch), envelope.UnknownOutcome)
		m.mu.Lock()
		m.hide = false
		m.mu.Unlock()
		base.Advance(30 * time.Second)
		op, err := agenttool.NewOperator(store, a)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
		t.Logf("sweep: %+v %v", rep, err)
		base.Advance(time.Minute)
		envB := b.Invoke(scoped(), lunchRephrased)
		t.Logf("B: %s", envB)
		base.Advance(9500 * time.Millisecond)
		envC := c.Invoke(scoped(), skewLunchReworded)
		t.Logf("C (+9.5s real, clock +1s): %s", envC)
		if n := m.count(); n != 1 {
			t.Fatalf("one logical action sent %d times: C's reworded copy ran 9.5s after B's answer told the model, inside NoticeHold (10s)", n)
		}
	})
}

// machineClock is this machine's clock plus an offset a test moves: a
// clock of the tools (Options.Now) that runs ahead for a while and comes
// back, or an NTP step.
type machineClock struct{ off atomic.Int64 }

func (c *machineClock) Now() time.Time      { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *machineClock) set(d time.Duration) { c.off.Store(int64(d)) }

// A settled action is replayed, not run again, for its whole key lifetime
// by the machine's clock: the tools' clock (and so the sweeper's) running
// two lifetimes ahead for a while takes no record away that is live once
// it is back — neither a write's dropping of boltstore's generations nor
// a sweep. (Found by a review: the sweep deleted both records during the
// jump, and both actions ran again after it, each answering success.)
func TestClockSkew_AToolsClockAheadForAWhileDeletesNothingLive(t *testing.T) {
	const ttl = time.Hour
	for _, sweep := range []bool{false, true} {
		t.Run(fmt.Sprintf("sweep=%v", sweep), func(t *testing.T) {
			ctx := context.Background()
			s := openBolt(t, filepath.Join(t.TempDir(), "keys.db"))
			clk := &machineClock{}
			dest := &skewDest{effects: map[string]int{}}
			send, err := agenttool.New("send_text", "Send a text.", func(ctx context.Context, in noteIn) (string, error) {
				dest.apply(agenttool.RequestRef(ctx))
				return "sent", nil
			}, agenttool.Options{Store: s, Class: agenttool.AtMostOnce, Now: clk.Now, KeyTTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			notes, err := agenttool.New("append_note", "Append a note.", appendNote(s),
				agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: s.Reconciler(), Now: clk.Now, KeyTTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			const text = `{"text":"tell ana the parcel left"}`
			first, firstNote := send.Invoke(scopedTo("s1"), text), notes.Invoke(scopedTo("s2"), text)
			mustStatus(t, first, envelope.Success)
			mustStatus(t, firstNote, envelope.Success)
			clk.set(2 * ttl)
			if sweep {
				op, err := agenttool.NewOperator(s, send, notes)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := op.SweepOnce(ctx, agenttool.SweeperOptions{}); err != nil {
					t.Fatal(err)
				}
			} else {
				mustStatus(t, send.Invoke(scopedTo("s3"), `{"text":"another"}`), envelope.Success)
			}
			clk.set(0) // both actions are seconds into their hour again
			again, againNote := send.Invoke(scopedTo("s1"), text), notes.Invoke(scopedTo("s2"), text)
			if n := dest.n(first.RequestRef); n != 1 || !again.Replayed {
				t.Errorf("send_text was sent %d times; the call again answered %s; want it replayed", n, again)
			}
			if n := notesCount(s); n != 1 || !againNote.Replayed {
				t.Errorf("append_note wrote %d notes; the call again answered %s; want it replayed", n, againNote)
			}
		})
	}
}

// The clock steps forward past the lease (and back, or not) while the
// tool runs, after its effect: the call's lease looks lapsed to itself.
// Its answer tells the truth, and the action, asked for again at once
// (the same input, and reworded in the same session), does not run
// twice. (From a review that found no fault.)
func TestClockSkew_AStepPastTheLeaseDuringTheAttemptRunsNothingTwice(t *testing.T) {
	for _, back := range []bool{false, true} {
		for _, class := range []agenttool.Class{agenttool.AtMostOnce, agenttool.Reconcilable} {
			t.Run(fmt.Sprintf("%v/back=%v", class, back), func(t *testing.T) {
				s := openBolt(t, filepath.Join(t.TempDir(), "keys.db"))
				clk := &machineClock{}
				dest := &skewDest{effects: map[string]int{}}
				opts := agenttool.Options{Store: s, Class: class, Now: clk.Now, KeyTTL: time.Hour, Lease: 2 * time.Second,
					Retry: fastRetry, WaitTimeout: time.Second}
				if class == agenttool.Reconcilable {
					opts.Reconciler = dest
				}
				var first atomic.Bool
				send, err := agenttool.New("send_text", "Send a text.", func(ctx context.Context, in noteIn) (string, error) {
					dest.apply(agenttool.RequestRef(ctx))
					if first.CompareAndSwap(false, true) {
						clk.set(time.Minute) // past the lease
						time.Sleep(50 * time.Millisecond)
						if back {
							clk.set(0)
						}
					}
					return "sent", nil
				}, opts)
				if err != nil {
					t.Fatal(err)
				}
				env := send.Invoke(scopedTo("s1"), `{"text":"hello"}`)
				if env.Status == envelope.DefiniteFailure && dest.n(env.RequestRef) != 0 {
					t.Errorf("the call whose tool sent answered definite_failure: %s", env)
				}
				again := send.Invoke(scopedTo("s1"), `{"text":"hello"}`)
				reworded := send.Invoke(scopedTo("s1"), `{"text":"hello!"}`)
				if n := dest.n(env.RequestRef); n != 1 {
					t.Errorf("sent %d times; answers: %s / %s", n, env, again)
				}
				if dest.n(reworded.RequestRef) != 0 && env.Status != envelope.Success {
					t.Errorf("the rewording ran after an action the model was not told was done (%s): %s", env, reworded)
				}
			})
		}
	}
}
