package agenttool_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// A call whose lease cannot be renewed stops its attempt before the lease
// ends: its context is cancelled with ErrLeaseLost, with a margin.
func TestLostLeaseStopsTheAttemptBeforeTheLeaseEnds(t *testing.T) {
	const lease = 90 * time.Millisecond
	store := &faultyStore{Store: memstore.New()}
	var cancelledAt time.Time
	var cause error
	started := time.Now()
	tool, err := agenttool.New("send_email", "", func(ctx context.Context, _ emailInput) (sent, error) {
		store.failRenew.Store(true) // the store goes away while the tool runs
		select {
		case <-ctx.Done():
			cancelledAt, cause = time.Now(), context.Cause(ctx)
			return sent{}, ctx.Err()
		case <-time.After(10 * lease):
			return sent{}, nil
		}
	}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, SettledByOperators: true, Lease: lease, KeyTTL: time.Hour, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), emailToAna)
	if !errors.Is(cause, agenttool.ErrLeaseLost) {
		t.Fatalf("the attempt's context ended with %v, want ErrLeaseLost", cause)
	}
	if d := cancelledAt.Sub(started); d >= lease {
		t.Errorf("the attempt was stopped %v after the claim, at or after its lease of %v ended", d, lease)
	}
	mustStatus(t, env, envelope.UnknownOutcome)
}

// The scenario: the store is unreachable for longer than
// the lease while a reconcilable tool's request is in flight; another call
// takes the key over, and the destination truthfully says "not applied"
// because the first request has not landed yet. That answer is not trusted
// until the first holder's lease end plus AttemptTimeout plus ClockSkew: the
// tool does not run twice, and no envelope claims a second success.
func TestTakeoverTrustsNotAppliedOnlyAfterTheHolderCannotBeInFlight(t *testing.T) {
	const lease = 60 * time.Millisecond
	store := &faultyStore{Store: memstore.New()}
	m := &mailServer{}
	landed := make(chan struct{})
	var runs atomic.Int64
	opts := agenttool.Options{Store: store, Class: agenttool.Reconcilable, Lease: lease, KeyTTL: time.Hour,
		AttemptTimeout: 200 * time.Millisecond, ClockSkew: 50 * time.Millisecond, Retry: agenttool.RetryPolicy{MaxAttempts: 1},
		Reconciler: mailboxReconciler(m, nil)}
	tool, err := agenttool.New("send_email", "", func(ctx context.Context, in emailInput) (sent, error) {
		if runs.Add(1) == 1 {
			store.failRenew.Store(true)
			// The request is on the wire; it lands after the lease lapsed,
			// whatever the caller does.
			time.Sleep(3 * lease)
			m.send(ctx, in)
			close(landed)
			return sent{}, errors.New("read: connection reset by peer")
		}
		return m.send(ctx, in)
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	var first envelope.Envelope
	var wg sync.WaitGroup
	wg.Go(func() { first = tool.Invoke(scoped(), emailToAna) })
	time.Sleep(2 * lease) // the first holder's lease has lapsed
	store.failRenew.Store(false)
	second := tool.Invoke(scoped(), emailToAna)
	wg.Wait()
	<-landed
	if runs.Load() != 1 || m.count() != 1 {
		t.Fatalf("the tool ran %d times, %d effects; want one", runs.Load(), m.count())
	}
	for _, env := range []envelope.Envelope{first, second} {
		if env.Status == envelope.DefiniteFailure {
			t.Errorf("an envelope says not applied: %s", env)
		}
	}
	// Once the first holder cannot be in flight, the destination is trusted.
	time.Sleep(opts.AttemptTimeout + opts.ClockSkew)
	third := tool.Invoke(scoped(), emailToAna)
	if third.Status != envelope.Success || !third.Reconciled || runs.Load() != 1 {
		t.Errorf("after the in-flight window: %s, runs %d; want the effect confirmed, not repeated", third, runs.Load())
	}
}

// A takeover by the sweeper (or an operator, an approver, the fence) keeps
// its lease while it checks: a check slower than the lease is not taken
// over by a caller, and two reconcilers never run at once for one key.
func TestTakeoverKeepsItsLeaseWhileItChecks(t *testing.T) {
	const lease = 250 * time.Millisecond // long enough that a loaded machine still renews it in time
	store := memstore.New()
	lost := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
	var inCheck, peak atomic.Int64
	slow := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		n := inCheck.Add(1)
		defer inCheck.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(5 * lease)
		return reconcile.StillPending()
	})
	opts := agenttool.Options{Store: store, Class: agenttool.Reconcilable, Lease: lease, KeyTTL: time.Hour, WaitTimeout: -1,
		ClockSkew: -1, Reconciler: slow, Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
	// The first call's attempt is lost; its own check is slow too.
	first := newEmailTool(t, lost, opts).Invoke(scoped(), emailToAna)
	mustStatus(t, first, envelope.UnknownOutcome)
	tool := newEmailTool(t, lost, opts)
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan agenttool.SweepReport)
	go func() {
		rep, _ := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
		done <- rep
	}()
	for inCheck.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(2 * lease) // the sweeper's first lease would have lapsed
	env := tool.Invoke(scoped(), emailToAna)
	if env.Error == nil || env.Error.Code != envelope.CodeInProgress {
		t.Errorf("a call during the sweeper's check: %s; want in_progress", env)
	}
	<-done
	if peak.Load() != 1 {
		t.Errorf("%d reconcilers ran at once for one key", peak.Load())
	}
	if lost.runs.Load() != 1 {
		t.Errorf("the tool ran %d times", lost.runs.Load())
	}
}

// A store that keeps answering "pending, lease expired" without granting
// the claim is polled with backoff, not hammered.
func TestClaimLoopBacksOffWhenTheStoreWillNotGrant(t *testing.T) {
	s := &stuckStore{Store: memstore.New()}
	tool := newEmailTool(t, &mailServer{}, agenttool.Options{Store: s, Class: agenttool.Keyed, WaitTimeout: 200 * time.Millisecond})
	env := tool.Invoke(scoped(), emailToAna)
	if env.Error == nil || env.Error.Code != envelope.CodeInProgress {
		t.Errorf("envelope %s; want in_progress", env)
	}
	if n := s.claims.Load(); n > 50 {
		t.Errorf("%d claims in 200ms; want a bounded, backed-off loop", n)
	}
}

type stuckStore struct {
	*memstore.Store
	claims atomic.Int64
}

func (s *stuckStore) Claim(_ context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	s.claims.Add(1)
	rec := agenttool.Record{Key: req.Key, Tool: req.Tool, State: agenttool.Pending, Principal: req.Principal,
		Fingerprint: req.Fingerprint, Token: 1, LeaseExpiry: req.Now.Add(-time.Second)}
	return storekit.ClaimResult{Record: rec}, nil
}

// A live lease is never treated as lapsed, whatever precision the store
// keeps: not listed, not fencing, not taken over.
//
// Leases are compared with the callers' clocks, which read nanoseconds
// (time.Now on Linux). pgstore keeps microseconds: a lease that ends at
// t+1m+0.5µs is stored as ending at t+1m, so at t+1m+0.1µs, while the
// holder's lease is live for every other store, pgstore lists the record
// as awaiting reconciliation, fences the scope with it, and hands it to a
// takeover: a second holder during the first one's lease.
func TestLease_LiveLeaseIsNeverLapsedEarly(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		s := open()
		ctx := context.Background()
		t0 := time.Date(2026, 11, 29, 12, 0, 0, 500, time.UTC) // 0.5µs past the second
		p, sess := agenttool.Digest{0xa1}, agenttool.Digest{0x51}
		req := storekit.ClaimRequest{Key: "send_email/holder", Tool: "send_email", Principal: p, Session: sess,
			Fingerprint: agenttool.Digest{1}, Owner: "holder", Now: t0, Lease: time.Minute, FenceScope: sess}
		first, err := s.Claim(ctx, req)
		if err != nil || !first.Claimed {
			t.Fatalf("claim: %+v %v", first, err)
		}
		at := time.Date(2026, 11, 29, 12, 1, 0, 100, time.UTC) // 0.4µs before the lease ends
		if first.Record.AwaitsReconciliation(at) {
			t.Fatal("test setup: the lease should be live")
		}
		listed, err := s.ListUnknown(ctx, storekit.ListRequest{Tool: "send_email", Principal: &p, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		other := req
		other.Key, other.Owner, other.Now = "send_email/new", "new", at
		fenced, err := s.Claim(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		take := req
		take.Owner, take.Now, take.TakeOver = "taker", at, true
		second, err := s.Claim(ctx, take)
		if err != nil {
			t.Fatal(err)
		}
		// The new action of the scope waits for the live holder; it is not
		// told the holder's action awaits reconciliation.
		lapsed := fenced.Blocked == nil || fenced.Blocked.AwaitsReconciliation(at)
		t.Logf("at %s: listed %d, blocked by a lapsed lease %v, takeover claimed %v", at.Format(time.RFC3339Nano), len(listed), lapsed, second.Claimed)
		if len(listed) != 0 || lapsed || second.Claimed {
			t.Fatalf("a live lease (ends %s) treated as lapsed at %s: listed %d, blocked by a lapsed lease %v, taken over %v",
				first.Record.LeaseExpiry.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano), len(listed), lapsed, second.Claimed)
		}
	})
}

// A holder killed mid-attempt keeps its lease — a paused holder may still
// act, so nothing takes its action over early — but a retry does not make
// the model wait for what cannot change within the wait: once the holder
// has missed its renewals (it renews every third of its lease) and its
// lease ends after the wait would, the retry answers in_progress at once,
// with retry_after saying when the hold ends.
// A holder that still renews is waited for, as before.
func TestLease_ACrashedHolderDoesNotStallTheModel(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.Schema(t, url)
	store, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	dest := fileDestination(filepath.Join(t.TempDir(), "dest"))
	runHelper(t, []string{"RETRYSAFE_CRASH_PG_SCHEMA=" + schema, "DATABASE_URL=" + url, "RETRYSAFE_CRASH_DEST=" + string(dest),
		"RETRYSAFE_CRASH_AT=" + beforeEffect, "RETRYSAFE_CRASH_CLASS=at-most-once"}, true)
	m := &mailServer{}
	for _, tc := range []struct {
		name    string
		ahead   time.Duration // how long after the holder's last renewal the retry comes
		wait    time.Duration
		stalled bool
	}{
		{"a holder that may still renew is waited for", 5 * time.Second, 50 * time.Millisecond, false},
		// Its lease ends in about 25 s, after the wait would: nothing can
		// change within the wait.
		{"a holder that missed its renewals answers at once", 35 * time.Second, 10 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &jumpClock{}
			clk.Advance(tc.ahead)
			tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Lease: time.Minute,
				WaitTimeout: tc.wait, Now: clk.Now})
			ctx, cancel := context.WithTimeout(scoped(), time.Minute) // a bound on a broken test, not a timing
			defer cancel()
			env := tool.Invoke(ctx, emailToAna)
			if env.Error == nil || env.Error.Code != envelope.CodeInProgress {
				t.Fatalf("a retry while the killed holder's lease runs: %s; want in_progress", env)
			}
			switch {
			case tc.stalled && (env.RetryAfter < 20 || env.RetryAfter > 26):
				t.Errorf("retry_after %d; want the rest of the dead holder's lease (about 25 s): %s", env.RetryAfter, env)
			case !tc.stalled && env.RetryAfter != 0:
				t.Errorf("a live holder's retry_after %d: %s", env.RetryAfter, env)
			}
			if m.runs.Load() != 0 || len(dest.effects(t)) != 0 {
				t.Fatal("the action ran while the dead holder's lease runs")
			}
		})
	}
}

// A held call is told the truth about a holder that stopped renewing: it
// may only be slow (a long GC pause, a VM migration), and what the model
// is told to do next — call again after retry_after — does not send a
// second email when that holder wakes up and does its action.
//
// Two replicas of one agent service share the store. Replica 1 runs the
// lunch email and pauses mid-attempt (a GC pause of 35 seconds on a
// 1-minute lease: no renewals). The conversation goes on at replica 2,
// whose model sends the email reworded: held, at once, "held by a call
// that has stopped answering; nothing new was done, and nothing can change
// for about 26 seconds: call again after that if this one is still
// needed" (retry_after). Replica 1 wakes a second later and delivers the
// lunch email, within its lease: a fresh success, which leaves no notice.
// The model, never told that the lunch email went out, calls again after
// retry_after, as told: the reworded copy is sent, a second lunch email.
// Had replica 1 died instead, the copy would have been fenced (unknown,
// verified first). The answer's "nothing can change for about 26 seconds"
// was not true either: the action was done within it.
func TestLease_AStalledHolderThatWakesSendsNoSecondCopy(t *testing.T) {
	clk := newClock()
	store := memstore.New()
	g := &gatedMail{mailServer: &mailServer{}, gate: make(chan struct{}), started: make(chan struct{})}
	g.script = func(n int) (bool, error) {
		if n == 1 {
			close(g.started)
			<-g.gate // paused
		}
		return true, nil
	}
	opts := agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Lease: time.Minute, WaitTimeout: 10 * time.Second, Now: clk.Now}
	replica1 := newEmailTool(t, g.mailServer, opts)
	replica2 := newEmailTool(t, g.mailServer, opts)

	done := make(chan envelope.Envelope, 1)
	go func() { done <- replica1.Invoke(scoped(), lunch) }()
	<-g.started
	clk.Advance(35 * time.Second) // replica 1 is paused: it renews nothing

	held := replica2.Invoke(scoped(), lunchReworded)
	t.Logf("replica 2, the reworded copy: %s", held)
	if held.Error == nil || held.Error.Code != envelope.CodeInProgress || held.RetryAfter == 0 {
		t.Fatalf("the reworded copy while replica 1 is paused: %s; want in_progress with retry_after", held)
	}

	clk.Advance(time.Second)
	close(g.gate) // replica 1 wakes and delivers
	first := <-done
	t.Logf("replica 1, the lunch email (an answer to a turn nobody waits for): %s", first)

	clk.Advance(time.Duration(held.RetryAfter) * time.Second)
	again := replica2.Invoke(scoped(), lunchReworded)
	t.Logf("replica 2, the reworded copy after retry_after: %s", again)
	if again.Status == envelope.Success {
		t.Errorf("the model, told only that the lunch email was held by a call that stopped answering, called again after retry_after and sent a second email: %s", again)
	}
	if n := g.count(); n != 1 {
		t.Errorf("one logical action (email Ana about lunch) left %d emails (%v)", n, g.effects)
	}
}

// slowRenewal is a store whose first renewal waits for release before it
// is written: a renewal that lands late (a slow commit, a lock wait, a
// pool that has no free connection), while the record still reads as last
// written.
type slowRenewal struct {
	*memstore.Store
	once             sync.Once
	started, release chan struct{}
}

func (s *slowRenewal) Renew(ctx context.Context, req storekit.RenewRequest) error {
	s.once.Do(func() {
		close(s.started)
		<-s.release
	})
	return s.Store.Renew(ctx, req)
}

// A holder whose record read as stalled settles its success with an
// untold notice — however the record came to read so. Here the holder is
// not paused: its renewal starts on time (a third of the lease in) but
// lands late, so that for a while the record, as last written, reads as
// held by a call that stopped answering. Replica 2's reworded copy in that
// while is answered so (in_progress, retry_after). The renewal then lands,
// the holder delivers the lunch email and, judging by the renewal it
// started in time, records a fresh success with no notice. The model,
// never told the email went out, calls again after retry_after as told:
// the reworded copy must be held back (the email was sent), not sent as a
// second lunch email.
func TestLease_AHolderWhoseRenewalLandsLateSendsNoSecondCopy(t *testing.T) {
	clk := newClock()
	store := &slowRenewal{Store: memstore.New(), started: make(chan struct{}), release: make(chan struct{})}
	g := &gatedMail{mailServer: &mailServer{}, gate: make(chan struct{}), started: make(chan struct{})}
	g.script = func(n int) (bool, error) {
		if n == 1 {
			close(g.started)
			<-g.gate // a slow SMTP server
		}
		return true, nil
	}
	const lease = 300 * time.Millisecond // renewed every 100 ms of real time; reads as stalled at 160 ms of the record's clock
	opts := agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Lease: lease, ClockSkew: 10 * time.Millisecond,
		WaitTimeout: 10 * time.Millisecond, Now: clk.Now}
	replica1 := newEmailTool(t, g.mailServer, opts)
	replica2 := newEmailTool(t, g.mailServer, opts)

	done := make(chan envelope.Envelope, 1)
	go func() { done <- replica1.Invoke(scoped(), lunch) }()
	<-g.started
	clk.Advance(lease / 3) // the renewal starts on time
	select {
	case <-store.started:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not renew")
	}
	clk.Advance(lease / 3) // and has not landed: the record reads as stalled
	held := replica2.Invoke(scoped(), lunchReworded)
	t.Logf("replica 2, the reworded copy while the renewal is on its way: %s", held)
	if held.Error == nil || held.Error.Code != envelope.CodeInProgress || held.RetryAfter == 0 {
		close(store.release)
		close(g.gate)
		<-done
		t.Fatalf("the reworded copy while the record reads as stalled: %s; want in_progress with retry_after", held)
	}
	close(store.release) // the renewal lands
	time.Sleep(20 * time.Millisecond)
	close(g.gate) // the holder delivers
	first := <-done
	t.Logf("replica 1, the lunch email: %s", first)

	clk.Advance(time.Duration(held.RetryAfter) * time.Second)
	again := replica2.Invoke(scoped(), lunchReworded)
	t.Logf("replica 2, the reworded copy after retry_after: %s", again)
	if again.Status == envelope.Success {
		t.Errorf("the model, told only that the lunch email was held by a call that stopped answering, called again after retry_after and sent a second email: %s", again)
	}
	if n := g.count(); n != 1 {
		t.Errorf("one logical action (email Ana about lunch) left %d emails (%v)", n, g.effects)
	}
}
