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

const review5Charge = `{"card":"card_ana","amount":4200}`

// keyForgotten's margin was "one attempt: AttemptTimeout, or else a
// lease". With AttemptTimeout 0 (the default) nothing bounded an attempt to
// a lease: the keeper renews the lease while the tool runs, precisely so
// that a slow but live attempt is not presumed dead. A retry started shortly
// before the destination's key lifetime ended passed the check; its request,
// slow to connect, reached the destination after it forgot the key, which
// charged again. Now every keyed attempt's context ends when the key may be
// forgotten. In real time: the attempt's context is what bounds it.
func TestReview5_KeyForgottenMarginIsNotAnAttemptBound(t *testing.T) {
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
	mustStatus(t, first.Invoke(scoped(), review5Charge), envelope.UnknownOutcome)
	time.Sleep(ttl - 150*time.Millisecond) // the model calls again shortly before the destination forgets
	opts.Retry = agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, MaxElapsed: 100 * time.Millisecond}
	second, err := agenttool.New("charge", "Charge a card.", charge, opts)
	if err != nil {
		t.Fatal(err)
	}
	env := second.Invoke(scoped(), review5Charge)
	time.Sleep(300 * time.Millisecond) // anything still in flight lands
	mu.Lock()
	defer mu.Unlock()
	if effects != 1 {
		t.Fatalf("one logical action, %d charges (%d runs); envelope %s", effects, runs, env)
	}
	if env.Status == envelope.Success {
		t.Errorf("envelope %s; the charge was not confirmed after the first", env)
	}
}

// keyForgotten compares the record's Created, written with the first
// process's clock, with this process's clock, and leaves out ClockSkew,
// which the library accepts between processes sharing a store (the
// takeover rule adds it). Process 1's clock is 1s ahead (ClockSkew 1s):
// process 2, 0.5s after the destination forgot the key, still finds the
// key 0.4s short of its lifetime plus one attempt, retries, and charges
// twice.
func TestReview5_KeyForgottenIgnoresClockSkew(t *testing.T) {
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
	mustStatus(t, p1.Invoke(scoped(), review5Charge), envelope.UnknownOutcome)
	clk.Advance(time.Hour + 500*time.Millisecond)
	env := p2.Invoke(scoped(), review5Charge)
	if dest.effects != 1 {
		t.Fatalf("one logical action, %d charges; clocks 1s apart (ClockSkew 1s); envelope %s", dest.effects, env)
	}
}
