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

// A keyed action unknown for just under DestinationKeyTTL is taken over
// and retried with its key: keyForgotten is asked once, at the claim. The
// call's own retries then go on past the destination's key lifetime, and
// the destination, which no longer knows the key, charges again.
func TestReview4_KeyedRetriesOutliveTheDestinationsKey(t *testing.T) {
	// The second call comes just before the key's lifetime: the takeover
	// itself must not retry blindly.
	t.Run("at the takeover", func(t *testing.T) { keyedRetriesOutlive(t, 24*time.Hour-time.Second, 3*time.Second, 0) })
	// A retry whose request would land after the destination forgot the
	// key: see TestReview5_KeyForgottenMarginIsNotAnAttemptBound, in real
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
	const chargeAna = `{"card":"card_ana","amount":4200}`
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
