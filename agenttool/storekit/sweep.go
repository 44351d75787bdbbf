package storekit

import (
	"context"
	"errors"
	"time"
)

// SweepRequest asks a [Store] for one step of a sweep.
type SweepRequest struct {
	Now time.Time
	// Limit is the most records the step deletes; 0 lets the store choose
	// a step that keeps calls waiting briefly (DefaultSweepLimit, unless
	// the store says otherwise).
	Limit int
}

// DefaultSweepLimit is the records one sweep step deletes at most when
// the request does not say.
const DefaultSweepLimit = 1000

// SweepGrowth bounds how far [SweepExpired] lets its steps grow while
// there is a backlog: to this many times its first step.
const SweepGrowth = 8

// SweepPlan bounds a sweep made of steps, for [SweepExpired].
type SweepPlan struct {
	// Now decides which records have expired.
	Now time.Time
	// Limit fixes the size of every step. 0 lets steps grow with the
	// backlog: the store's own step first; after a step that deleted as
	// many records as it was allowed, twice as many, up to SweepGrowth
	// times the first step. A step's cost is mostly fixed (a transaction,
	// a commit): bigger steps delete a backlog faster for the same share
	// of the store's time.
	Limit int
	// Budget bounds the sweep's time: no step starts once Budget has
	// passed since the first began (one step always runs). What is left
	// waits for the next sweep. 0 means no bound.
	Budget time.Duration
	// Progress, if not nil, is called after each step with the records
	// deleted so far.
	Progress func(deleted int)
}

// SweepExpired deletes the records that expired by plan.Now, in steps
// ([Store.Sweep]), until a step deletes nothing, plan.Budget has passed,
// or ctx ends. Between steps it pauses as long as the last step took (at
// most a second), so that calls get at least half of the store's time
// while a large sweep runs. It returns the records deleted, whether it
// stopped for its budget with expired records left (more), and the
// corrupt records the steps reported, joined; it stops at the first other
// error.
func SweepExpired(ctx context.Context, store Store, plan SweepPlan) (deleted int, more bool, err error) {
	var corrupt []error
	reported := map[string]bool{} // a corrupt record stays, and each step meets it again
	began := time.Now()
	limit, first := plan.Limit, 0
	for {
		start := time.Now()
		n, err := store.Sweep(ctx, SweepRequest{Now: plan.Now, Limit: limit})
		took := time.Since(start)
		deleted += n
		keys := CorruptKeys(err)
		if err != nil && len(keys) == 0 {
			return deleted, false, err
		}
		for _, k := range keys {
			if !reported[k] {
				reported[k] = true
				corrupt = append(corrupt, err)
				break
			}
		}
		if plan.Progress != nil {
			plan.Progress(deleted)
		}
		if n == 0 {
			return deleted, false, errors.Join(corrupt...)
		}
		if plan.Limit == 0 {
			// The store's own step first; a step that used all it was
			// allowed means a backlog.
			if first == 0 {
				first = n
			}
			if limit == 0 || n >= limit {
				limit = min(2*n, SweepGrowth*first)
			}
		}
		if plan.Budget > 0 && time.Since(began) >= plan.Budget {
			return deleted, true, errors.Join(corrupt...)
		}
		pause := time.NewTimer(min(took, time.Second))
		select {
		case <-ctx.Done():
			pause.Stop()
			return deleted, true, ctx.Err()
		case <-pause.C:
		}
	}
}

// SweepAll sweeps store until nothing expired by now is left:
// [SweepExpired] with no budget, in steps of limit records (0: steps that
// grow with the backlog). It returns the records deleted.
func SweepAll(ctx context.Context, store Store, now time.Time, limit int, progress func(deleted int)) (int, error) {
	n, _, err := SweepExpired(ctx, store, SweepPlan{Now: now, Limit: limit, Progress: progress})
	return n, err
}
