package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// The sweeper's rules, on every store: a pass checks unknown outcomes
// beside its deletions, never behind them, and deletes a backlog in steps
// that grow with it.

// importExpired fills s with n succeeded records whose lifetime ended an
// hour before now, through storekit.Importer (which every store of this
// module implements).
func importExpired(t *testing.T, s agenttool.Store, n int, now time.Time) {
	t.Helper()
	im, ok := s.(storekit.Importer)
	if !ok {
		t.Skip("the store does not implement storekit.Importer")
	}
	batch := make([]agenttool.Record, 0, 1000)
	for i := range n {
		batch = append(batch, agenttool.Record{
			Key: newKey(), Tool: "conformance", State: agenttool.Succeeded, Principal: alice, Fingerprint: inputA,
			Token: uint64(i + 1), Attempts: 1, Outcome: []byte(`{"outcome":"succeeded"}`),
			Created: now.Add(-2 * time.Hour), Updated: now.Add(-2 * time.Hour), Expires: now.Add(-time.Hour),
		})
		if len(batch) == cap(batch) || i == n-1 {
			if err := im.Import(bg, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// gatedSweeps holds every sweep step of a store until gate is closed (at
// most a while), and records whether one had to wait in vain.
type gatedSweeps struct {
	agenttool.Store
	gate   <-chan struct{}
	waited atomic.Bool // a step gave up waiting
}

func (g *gatedSweeps) Sweep(ctx context.Context, req storekit.SweepRequest) (int, error) {
	select {
	case <-g.gate:
	case <-time.After(10 * time.Second):
		g.waited.Store(true)
	}
	return g.Store.Sweep(ctx, req)
}

// gatedClaimer is gatedSweeps for a store that hands out unknown records
// in batches (storekit.UnknownClaimer), which the sweeper then uses.
type gatedClaimer struct {
	*gatedSweeps
	storekit.UnknownClaimer
}

// testSweepChecksBesideDeletions: a sweeper pass over a store with a
// backlog of expired records and a few unknown outcomes checks the unknown
// ones while its deletions are still to run — its deletion steps here wait
// until every check is done, so a pass that checked only after deleting
// would not check at all within the wait — and then deletes the backlog.
func testSweepChecksBesideDeletions(t *testing.T, s agenttool.Store) {
	const backlog, unknown = 600, 3
	importExpired(t, s, backlog, time.Now())
	gate := make(chan struct{})
	gated := &gatedSweeps{Store: s, gate: gate}
	var store agenttool.Store = gated
	if uc, ok := s.(storekit.UnknownClaimer); ok {
		store = gatedClaimer{gated, uc}
	}
	var sweeping atomic.Bool
	var checked atomic.Int64
	var open sync.Once
	check := reconcile.Func(func(context.Context, string) reconcile.Answer {
		if !sweeping.Load() {
			return reconcile.StillPending() // the calls end unknown
		}
		if checked.Add(1) == unknown {
			open.Do(func() { close(gate) })
		}
		return reconcile.AppliedWith([]byte(`{"sent":true}`))
	})
	type mail struct {
		To string `json:"to"`
	}
	tool, err := agenttool.New(fmt.Sprintf("sweep_first_%d", keyCount.Add(1)), "Send.",
		func(context.Context, mail) (string, error) {
			return "", envelope.MarkUnknown(errors.New("the reply was lost"))
		},
		agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range unknown {
		ctx := agenttool.WithScope(bg, "conformance", fmt.Sprintf("session-%d", i))
		if env := tool.Invoke(ctx, fmt.Sprintf(`{"to":"user%d@example.com"}`, i)); env.Status != envelope.UnknownOutcome {
			t.Fatalf("call %d: %s; want unknown_outcome", i, env)
		}
	}
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	sweeping.Store(true)
	rep, err := op.SweepOnce(bg, agenttool.SweeperOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gated.waited.Load() || rep.Checked != unknown || rep.Applied != unknown {
		t.Errorf("pass: %+v; deletions waited in vain for the checks: %v; want all %d unknown outcomes checked while the deletions waited",
			rep, gated.waited.Load(), unknown)
	}
	if rep.Expired != backlog {
		t.Errorf("the pass deleted %d of %d expired records", rep.Expired, backlog)
	}
}

// limits records the limit of every sweep step asked of a store, and what
// the step deleted.
type limits struct {
	agenttool.Store
	mu    sync.Mutex
	asked []int
	got   []int
}

func (l *limits) Sweep(ctx context.Context, req storekit.SweepRequest) (int, error) {
	n, err := l.Store.Sweep(ctx, req)
	l.mu.Lock()
	l.asked, l.got = append(l.asked, req.Limit), append(l.got, n)
	l.mu.Unlock()
	return n, err
}

// testSweepStepsGrowWithBacklog: on a backlog larger than the store's own
// step, SweepAll tries a step twice as big (it keeps bigger steps only
// where they make a record cheaper to delete, which depends on the
// machine), never more than storekit.SweepGrowth times the first; the
// store honours limits above its own step, and everything expired goes.
func testSweepStepsGrowWithBacklog(t *testing.T, s agenttool.Store) {
	const backlog = 2500
	now := time.Now()
	importExpired(t, s, backlog, now)
	l := &limits{Store: s}
	total, err := storekit.SweepAll(bg, l, now, 0, nil)
	if err != nil || total != backlog {
		t.Fatalf("SweepAll: %d, %v; want %d", total, err, backlog)
	}
	t.Logf("steps asked %v, deleted %v", l.asked, l.got)
	first := l.got[0]
	if l.asked[0] != 0 || first == 0 {
		t.Fatalf("first step asked %d, deleted %d; want the store's own step (0), deleting some", l.asked[0], first)
	}
	if first < backlog && (len(l.asked) < 2 || l.asked[1] != 2*first || l.got[1] != min(2*first, backlog-first)) {
		t.Errorf("after a full first step of %d, the next asked %v and deleted %v; want twice as many", first, l.asked[1:], l.got[1:])
	}
	for i := 1; i < len(l.asked); i++ {
		if l.asked[i] < first || l.asked[i] > storekit.SweepGrowth*first || l.got[i] > l.asked[i] {
			t.Errorf("step %d asked %d and deleted %d; want between the first step (%d) and %d times it, and no more than asked",
				i, l.asked[i], l.got[i], first, storekit.SweepGrowth)
		}
	}
}
