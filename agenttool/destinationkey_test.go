package agenttool_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// forgetfulDest honours an idempotency key for ttl after it first saw it,
// as Stripe does for 24 hours, on the test's clock.
type forgetfulDest struct {
	mu      sync.Mutex
	clk     *clock
	ttl     time.Duration
	seen    map[string]time.Time
	effects int
}

func (d *forgetfulDest) apply(ref string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clk.Now()
	if at, ok := d.seen[ref]; ok && now.Sub(at) < d.ttl {
		return // deduplicated
	}
	d.seen[ref] = now
	d.effects++
}

type chargeInput struct {
	Card   string `json:"card"`
	Amount int    `json:"amount"`
}

type charged struct {
	ChargeID string `json:"charge_id"`
}

// A keyed action is not retried after the destination may have forgotten its
// key: a takeover near the end of DestinationKeyTTL does not retry blindly.
//
// A keyed action unknown for just under DestinationKeyTTL is taken over
// and retried with its key: keyForgotten is asked once, at the claim. The
// call's own retries then go on past the destination's key lifetime, and
// the destination, which no longer knows the key, charges again.
func TestDestinationKey_TakeoverDoesNotRetryPastIt(t *testing.T) {
	// The second call comes just before the key's lifetime: the takeover
	// itself must not retry blindly.
	t.Run("at the takeover", func(t *testing.T) { keyedRetriesOutlive(t, 24*time.Hour-time.Second, 3*time.Second, 0) })
	// A retry whose request would land after the destination forgot the
	// key: see TestDestinationKey_AttemptEndsBeforeTheKeyIsForgotten, in real
	// time, since the attempt's context is what bounds it.
}

func keyedRetriesOutlive(t *testing.T, callAt, slowAttempt, inFlight time.Duration) {
	clk := newClock()
	dest := &forgetfulDest{clk: clk, ttl: 24 * time.Hour, seen: map[string]time.Time{}}
	var mu sync.Mutex
	runs := 0
	charge := func(ctx context.Context, in chargeInput) (charged, error) {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		switch n {
		case 1: // charged, reply lost
			dest.apply(agenttool.RequestRef(ctx))
			return charged{}, errLostReply
		case 2: // a day later: the destination still knows the key; the reply is lost after 3s
			dest.apply(agenttool.RequestRef(ctx))
			clk.Advance(slowAttempt)
			return charged{}, errLostReply
		}
		clk.Advance(inFlight)
		dest.apply(agenttool.RequestRef(ctx))
		return charged{ChargeID: "ch_1"}, nil
	}
	store := memstore.New()
	opts := agenttool.Options{Store: store, Class: agenttool.Keyed, Now: clk.Now,
		DestinationKeyTTL: 24 * time.Hour,
		Retry:             agenttool.RetryPolicy{MaxAttempts: 1}}
	first, err := agenttool.New("charge", "Charge a card.", charge, opts)
	if err != nil {
		t.Fatal(err)
	}
	env := first.Invoke(scoped(), chargeAna)
	mustStatus(t, env, envelope.UnknownOutcome)
	if env.Next != envelope.Wait {
		t.Fatalf("keyed unknown: %s", env)
	}
	// The model (or a new process) calls again with the same input, as the
	// envelope says is safe, at callAt.
	clk.Advance(callAt)
	opts.Retry = agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond}
	second, err := agenttool.New("charge", "Charge a card.", charge, opts)
	if err != nil {
		t.Fatal(err)
	}
	env = second.Invoke(scoped(), chargeAna)
	if dest.effects != 1 {
		t.Fatalf("one logical action, %d charges (attempts %d); envelope %s", dest.effects, runs, env)
	}
}

const chargeAna = `{"card":"card_ana","amount":4200}`

// A keyed attempt's context ends when the destination may forget its key.
//
// keyForgotten's margin was "one attempt: AttemptTimeout, or else a
// lease". With AttemptTimeout 0 (the default) nothing bounded an attempt to
// a lease: the keeper renews the lease while the tool runs, precisely so
// that a slow but live attempt is not presumed dead. A retry started shortly
// before the destination's key lifetime ended passed the check; its request,
// slow to connect, reached the destination after it forgot the key, which
// charged again. Now every keyed attempt's context ends when the key may be
// forgotten. In real time: the attempt's context is what bounds it.
func TestDestinationKey_AttemptEndsBeforeTheKeyIsForgotten(t *testing.T) {
	const ttl = 400 * time.Millisecond
	var mu sync.Mutex
	seen := map[string]time.Time{}
	effects, runs := 0, 0
	apply := func(ref string) { // a destination that keeps keys for ttl
		mu.Lock()
		defer mu.Unlock()
		if at, ok := seen[ref]; ok && time.Since(at) < ttl {
			return
		}
		seen[ref] = time.Now()
		effects++
	}
	charge := func(ctx context.Context, in chargeInput) (charged, error) {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		if n <= 2 { // charged (then deduplicated), reply lost
			apply(agenttool.RequestRef(ctx))
			return charged{}, errLostReply
		}
		select { // slow to connect: the request lands 300ms later, unless cancelled
		case <-time.After(300 * time.Millisecond):
			apply(agenttool.RequestRef(ctx))
			return charged{ChargeID: "ch_1"}, nil
		case <-ctx.Done():
			return charged{}, ctx.Err()
		}
	}
	opts := agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, DestinationKeyTTL: ttl, ClockSkew: -1,
		Lease: 50 * time.Millisecond, Retry: agenttool.RetryPolicy{MaxAttempts: 1, MaxElapsed: 100 * time.Millisecond}}
	first, err := agenttool.New("charge", "Charge a card.", charge, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, first.Invoke(scoped(), chargeAna), envelope.UnknownOutcome)
	// Real time passes: the destination's key lifetime and the attempt's
	// context are both on the wall clock. The model calls again shortly
	// before the destination forgets the key.
	time.Sleep(ttl - 150*time.Millisecond)
	opts.Retry = agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, MaxElapsed: 100 * time.Millisecond}
	second, err := agenttool.New("charge", "Charge a card.", charge, opts)
	if err != nil {
		t.Fatal(err)
	}
	env := second.Invoke(scoped(), chargeAna)
	time.Sleep(300 * time.Millisecond) // a bounded wait for what must not happen: a late request landing as a second charge
	mu.Lock()
	defer mu.Unlock()
	if effects != 1 {
		t.Fatalf("one logical action, %d charges (%d runs); envelope %s", effects, runs, env)
	}
	if env.Status == envelope.Success {
		t.Errorf("envelope %s; the charge was not confirmed after the first", env)
	}
}

// The destination key's lifetime is judged with ClockSkew between the
// processes' clocks.
//
// keyForgotten compares the record's Created, written with the first
// process's clock, with this process's clock, and leaves out ClockSkew,
// which the library accepts between processes sharing a store (the
// takeover rule adds it). Process 1's clock is 1s ahead (ClockSkew 1s):
// process 2, 0.5s after the destination forgot the key, still finds the
// key 0.4s short of its lifetime plus one attempt, retries, and charges
// twice.
func TestDestinationKey_CountsClockSkew(t *testing.T) {
	clk := newClock() // the true time, and the destination's clock
	dest := &forgetfulDest{clk: clk, ttl: time.Hour, seen: map[string]time.Time{}}
	var mu sync.Mutex
	runs := 0
	charge := func(ctx context.Context, in chargeInput) (charged, error) {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		dest.apply(agenttool.RequestRef(ctx))
		if n == 1 {
			return charged{}, errLostReply // charged, reply lost
		}
		return charged{ChargeID: "ch_1"}, nil
	}
	store := memstore.New()
	opts := func(now func() time.Time) agenttool.Options {
		return agenttool.Options{Store: store, Class: agenttool.Keyed, Now: now, DestinationKeyTTL: time.Hour,
			AttemptTimeout: 100 * time.Millisecond, ClockSkew: time.Second, Lease: time.Minute, KeyTTL: 24 * time.Hour,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
	}
	ahead := func() time.Time { return clk.Now().Add(time.Second) }
	p1, err := agenttool.New("charge", "Charge a card.", charge, opts(ahead))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := agenttool.New("charge", "Charge a card.", charge, opts(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, p1.Invoke(scoped(), chargeAna), envelope.UnknownOutcome)
	clk.Advance(time.Hour + 500*time.Millisecond)
	env := p2.Invoke(scoped(), chargeAna)
	if dest.effects != 1 {
		t.Fatalf("one logical action, %d charges; clocks 1s apart (ClockSkew 1s); envelope %s", dest.effects, env)
	}
}
