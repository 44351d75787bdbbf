package agenttool_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// honestDest applies effects by ref, knows what is in flight, and answers
// checks truthfully: Applied, Pending while a request for the ref is in
// flight, NotApplied otherwise.
type honestDest struct {
	mu       sync.Mutex
	effects  map[string]int
	inflight map[string]int
	rng      *rand.Rand
}

func (d *honestDest) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	ref := req.Ref
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.effects[ref] > 0:
		return reconcile.AppliedWith([]byte(`{"found":true}`))
	case d.inflight[ref] > 0:
		return reconcile.StillPending()
	}
	return reconcile.NotAppliedYet()
}

func (d *honestDest) send(ctx context.Context, in emailInput) (sent, error) {
	ref := agenttool.RequestRef(ctx)
	d.mu.Lock()
	d.inflight[ref]++
	r := d.rng.IntN(10)
	delay := time.Duration(d.rng.IntN(3)) * time.Millisecond
	d.mu.Unlock()
	time.Sleep(delay)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inflight[ref]--
	switch {
	case r < 3:
		return sent{}, errLostReply // not applied, reply lost
	case r < 6:
		d.effects[ref]++
		return sent{}, errLostReply // applied, reply lost
	case r < 7:
		return sent{}, envelope.MarkTransient(errors.New("503"))
	}
	d.effects[ref]++
	return sent{MessageID: ref}, nil
}

func TestSweeperRacingCallsNeverAppliesTwice(t *testing.T) {
	for seed := range uint64(40) {
		d := &honestDest{effects: map[string]int{}, inflight: map[string]int{}, rng: rand.New(rand.NewPCG(seed, 1))}
		store := memstore.New()
		tool, err := agenttool.New("send_email", "Send.", d.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
			Reconciler: d, Retry: fastRetry, Lease: 30 * time.Millisecond, WaitTimeout: 5 * time.Millisecond, ClockSkew: -1})
		if err != nil {
			t.Fatal(err)
		}
		op, _ := agenttool.NewOperator(store, tool)
		inputs := []string{lunch, lunchReworded, `{"to":"ana@example.com","subject":"LUNCH","body":"See you at noon."}`}
		var wg sync.WaitGroup
		var emu sync.Mutex
		var envs []envelope.Envelope
		for g := range 8 {
			wg.Go(func() {
				for i := range 10 {
					env := tool.Invoke(scoped(), inputs[(g+i)%len(inputs)])
					emu.Lock()
					envs = append(envs, env)
					emu.Unlock()
				}
			})
		}
		wg.Go(func() {
			for range 20 {
				op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		d.mu.Lock()
		total := 0
		for ref, n := range d.effects {
			total += n
			if n > 1 {
				t.Errorf("seed %d: %s applied %d times", seed, ref, n)
			}
		}
		for _, env := range envs {
			if env.Status == envelope.Success && d.effects[env.RequestRef] == 0 {
				t.Errorf("seed %d: success for %s, never applied: %s", seed, env.RequestRef, env)
			}
		}
		if total > 1 {
			t.Logf("seed %d: %d emails for lunch/reworded: %v", seed, total, d.effects)
		}
		d.mu.Unlock()
		_ = fmt.Sprint()
	}
}
