package agenttool_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// fault is what happens to one attempt in the random model.
type fault int

const (
	faultNone              fault = iota
	faultLostReply               // applied, the reply is lost (unknown)
	faultSlowReply               // applied after the caller's timeout (unknown)
	faultLostRequest             // not applied, looks the same as a lost reply (unknown)
	faultTransient               // refused before applying (503)
	faultDefinite                // refused for good (422)
	faultCrashBeforeEffect       // the process dies before reaching the destination
	faultCrashAfterEffect        // the process dies after the destination applied
	faultCrashAfterRecord        // the process dies after recording, before replying
	numFaults
)

var errProcessDead = errors.New("process is dead")

// mortalStore is the durable store as seen from one process: once the
// process dies, nothing it does reaches the store any more.
type mortalStore struct {
	agenttool.Store
	dead *atomic.Bool
}

func (s mortalStore) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if s.dead.Load() {
		return storekit.ClaimResult{}, errProcessDead
	}
	return s.Store.Claim(ctx, r)
}

func (s mortalStore) Finish(ctx context.Context, r storekit.FinishRequest) error {
	if s.dead.Load() {
		return errProcessDead
	}
	return s.Store.Finish(ctx, r)
}

func (s mortalStore) Release(ctx context.Context, key string, token uint64) error {
	if s.dead.Load() {
		return errProcessDead
	}
	return s.Store.Release(ctx, key, token)
}

func (s mortalStore) Renew(ctx context.Context, req storekit.RenewRequest) error {
	if s.dead.Load() {
		return errProcessDead
	}
	return s.Store.Renew(ctx, req)
}

// world is one run of the model: a durable store, a destination and a clock
// that survive crashes, and the processes that come and go.
type world struct {
	t       *testing.T
	rng     *rand.Rand
	clk     *clock
	store   *memstore.Store
	class   agenttool.Class
	applied map[string]int // effects at the destination, by reference
	dupes   map[string]int // requests for an already applied reference (non-keyed destinations)
	log     []string       // what happened, printed on failure
}

func (w *world) logf(format string, args ...any) { w.log = append(w.log, fmt.Sprintf(format, args...)) }

func (w *world) fail(seed uint64, run int, format string, args ...any) {
	w.t.Helper()
	for _, l := range w.log {
		w.t.Log(l)
	}
	w.t.Fatalf("seed %d run %d (%v): %s\nreproduce with RETRYSAFE_SEED=%d", seed, run, w.class, fmt.Sprintf(format, args...), seed)
}

// process builds a fresh process's tool over the durable store.
func (w *world) process() (*agenttool.Tool, *atomic.Bool, *bool) {
	dead := &atomic.Bool{}
	crashAfterRecord := new(bool)
	send := func(ctx context.Context, in emailInput) (sent, error) {
		ref := agenttool.RequestRef(ctx)
		f := fault(w.rng.IntN(int(numFaults)))
		w.logf("attempt %s: fault %d", ref, f)
		apply := func() {
			if w.applied[ref] > 0 {
				if w.class != agenttool.Keyed {
					w.dupes[ref]++
				}
				return // a keyed destination honours the key
			}
			w.applied[ref]++
		}
		switch f {
		case faultLostReply:
			apply()
			return sent{}, errLostReply
		case faultSlowReply:
			apply()
			return sent{}, context.DeadlineExceeded
		case faultLostRequest:
			return sent{}, errLostReply
		case faultTransient:
			return sent{}, &envelope.HTTPError{StatusCode: 503}
		case faultDefinite:
			return sent{}, &envelope.HTTPError{StatusCode: 422}
		case faultCrashBeforeEffect:
			dead.Store(true)
			return sent{}, errProcessDead
		case faultCrashAfterEffect:
			apply()
			dead.Store(true)
			return sent{}, errProcessDead
		case faultCrashAfterRecord:
			apply()
			*crashAfterRecord = true
			return sent{MessageID: ref}, nil
		}
		apply()
		return sent{MessageID: ref}, nil
	}
	opts := agenttool.Options{
		Store: mortalStore{Store: w.store, dead: dead}, Class: w.class, Now: w.clk.Now, Lease: time.Minute,
		Retry: agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Microsecond, MaxInterval: time.Microsecond},
		Hooks: agenttool.Hooks{Outcome: func(_ context.Context, _ agenttool.OutcomeEvent) {
			if *crashAfterRecord {
				dead.Store(true)
			}
		}},
	}
	truthful := func(ref string) reconcile.Answer {
		if w.applied[ref] > 0 {
			return reconcile.AppliedWith([]byte(`{"message_id":"` + ref + `"}`))
		}
		return reconcile.NotAppliedYet()
	}
	switch w.class {
	case agenttool.Reconcilable:
		opts.Reconciler = reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
			switch w.rng.IntN(4) {
			case 0:
				return reconcile.StillPending()
			case 1:
				return reconcile.CantSayBecause(errors.New("status API unreachable"))
			}
			return truthful(ref)
		})
	case agenttool.AtMostOnce:
		opts.Approver = agenttool.ApproverFunc(func(ctx context.Context, req agenttool.ApprovalRequest) (agenttool.Approval, error) {
			if w.rng.IntN(2) == 0 || w.applied[req.RequestRef] > 0 {
				return agenttool.Approval{}, nil // no decision yet, or a person who sees it went out
			}
			return agenttool.Approval{Decision: agenttool.RetryOnce, By: "checker", Reason: "not in the provider's log", Attempts: req.Attempts}, nil
		})
	}
	tool, err := agenttool.New("send_email", "Send an email.", send, opts)
	if err != nil {
		w.t.Fatal(err)
	}
	return tool, dead, crashAfterRecord
}

// TestRandomModel plays thousands of seeded runs in which a model keeps
// calling for one logical action through lost and slow replies, refusals,
// crashes and reconciler answers, and checks I1 and I2 against the
// destination after every envelope.
func TestRandomModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RETRYSAFE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	runs := 3000
	if testing.Short() {
		runs = 300
	}
	t.Logf("seed %d (RETRYSAFE_SEED=%d reproduces this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	classes := []agenttool.Class{agenttool.Keyed, agenttool.Reconcilable, agenttool.AtMostOnce}
	seen := map[envelope.Status]int{}
	for run := range runs {
		w := &world{t: t, rng: rng, clk: newClock(), store: memstore.New(), class: classes[rng.IntN(len(classes))],
			applied: map[string]int{}, dupes: map[string]int{}}
		tool, dead, _ := w.process()
		for call := 0; call < 8; call++ {
			env := tool.Invoke(scoped(), emailToAna)
			ref := env.RequestRef
			w.logf("call %d: %s", call, env)
			if w.applied[ref] > 1 || w.dupes[ref] > 0 {
				w.fail(seed, run, "I1: %d effects and %d requests for an applied reference", w.applied[ref], w.dupes[ref])
			}
			if dead.Load() {
				// Nobody saw that envelope. A new process starts once the
				// dead one's lease has lapsed.
				w.clk.Advance(2 * time.Minute)
				tool, dead, _ = w.process()
				continue
			}
			seen[env.Status]++
			switch env.Status {
			case envelope.Success:
				if w.applied[ref] != 1 {
					w.fail(seed, run, "I2: success with %d effects", w.applied[ref])
				}
			case envelope.DefiniteFailure:
				if w.applied[ref] != 0 {
					w.fail(seed, run, "I2: definite_failure with %d effects", w.applied[ref])
				}
			case envelope.UnknownOutcome:
				rec, err := w.store.Get(context.Background(), ref)
				if err != nil || !rec.AwaitsReconciliation(w.clk.Now()) && rec.State != agenttool.Pending {
					w.fail(seed, run, "I2: unknown_outcome without a record awaiting reconciliation: %+v, %v", rec, err)
				}
			}
			if env.Status == envelope.Success || (env.Status == envelope.DefiniteFailure && env.Error.Code == "http_422") {
				break
			}
		}
	}
	t.Logf("%d runs; envelopes seen: %v", runs, seen)
	if seen[envelope.Success] == 0 || seen[envelope.DefiniteFailure] == 0 || seen[envelope.UnknownOutcome] == 0 {
		t.Errorf("the model did not reach every status: %v", seen)
	}
}
