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

// stepSizes sizes the steps of a sweep that lets them grow with a
// backlog. A step costs a fixed part (a transaction, a commit, the wait
// for calls' commits under load) and a part per record deleted; calls that
// meet a step wait for it. After a full step it tries one twice as big; the
// bigger size stays (and the next doubling is tried) if it cost at most
// three quarters as much per record — the fixed part dominated — and took
// at most twice as long as the sweep's first step, so that no call waits
// behind a step much longer than behind the store's own; if not, the sweep
// goes back to the last size that paid and keeps it. So a lone store, whose
// steps cost by the record, keeps its own short step, while a busy one,
// whose steps mostly wait for calls' commits, deletes in bigger steps and
// keeps up with expiry.
type stepSizes struct {
	first     int           // records of the first step (the store's own size)
	firstTook time.Duration // and its time
	limit     int           // of the next step
	per       time.Duration // per record, at the last size that paid
	fixed     bool          // the size stopped changing
}

// after returns the limit of the step that follows one that was allowed
// asked records (0: the store's own step) and deleted n in took.
func (s *stepSizes) after(asked, n int, took time.Duration) int {
	if n == 0 || n < asked || s.fixed {
		return s.limit // not full (or settled): the same size
	}
	per := took / time.Duration(n)
	switch {
	case s.first == 0:
		s.first, s.firstTook, s.per, s.limit = n, took, per, 2*n
	case per*4 <= s.per*3 && took <= 2*s.firstTook:
		s.per, s.limit = per, min(2*n, SweepGrowth*s.first)
		s.fixed = s.limit == asked // as big as steps get
	default:
		s.limit, s.fixed = max(asked/2, s.first), true
	}
	return s.limit
}

// SweepStepBound is implemented by a store whose step deletes at most
// MaxSweepStep records one by one, whatever its request asks: boltstore,
// whose step of its own size may also drop whole groups of expired records
// and count them, which a step's size must not grow from. [SweepExpired]
// asks such a store for no more, so that a step that deleted that many
// counts as full.
type SweepStepBound interface {
	MaxSweepStep() int
}

// SweepPlan bounds a sweep made of steps, for [SweepExpired].
type SweepPlan struct {
	// Now decides which records have expired.
	Now time.Time
	// Limit fixes the size of every step. 0 lets steps grow with the
	// backlog: the store's own step first, then, while steps come back
	// full, twice as many records as long as that makes a record cheaper
	// to delete (up to SweepGrowth times the first step): under load a
	// step's cost is mostly fixed (a commit, the wait for calls' commits),
	// and bigger steps delete a backlog faster for the same share of the
	// store's time.
	Limit int
	// Budget bounds the sweep's time: no step starts once Budget has
	// passed since the first began (one step always runs). What is left
	// waits for the next sweep. 0 means no bound.
	Budget time.Duration
	// Eager drops the pause after a full step: for a sweep that has fallen
	// behind expiry (the last one stopped for its budget with records
	// left), which must catch up even if calls slow down meanwhile. Calls
	// still wait behind one step at most.
	Eager bool
	// Progress, if not nil, is called after each step with the records
	// deleted so far.
	Progress func(deleted int)
}

// SweepExpired deletes the records that expired by plan.Now, in steps
// ([Store.Sweep]), until a step deletes nothing, plan.Budget has passed,
// or ctx ends. Between steps it pauses as long as the last step took (at
// most a second), so that calls get at least half of the store's time
// while a large sweep runs — except after a full step of an eager sweep,
// which must catch up with expiry. It returns the records deleted, whether
// it stopped for its budget after a full step (more: expired records are
// left), and the corrupt records the steps reported, joined; it stops at
// the first other error.
func SweepExpired(ctx context.Context, store Store, plan SweepPlan) (deleted int, more bool, err error) {
	var corrupt []error
	reported := map[string]bool{} // a corrupt record stays, and each step meets it again
	began := time.Now()
	bound := func(limit int) int { return limit }
	if b, ok := store.(SweepStepBound); ok && b.MaxSweepStep() > 0 {
		bound = func(limit int) int { return min(limit, b.MaxSweepStep()) }
	}
	limit := bound(plan.Limit)
	var sizes stepSizes
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
		// A step that deleted all it was allowed leaves a backlog (the
		// store's own first step may have).
		asked := limit
		pause, full := took, asked > 0 && n >= asked
		if full && plan.Eager {
			pause = 0
		}
		if plan.Limit == 0 {
			limit = bound(sizes.after(asked, n, took))
		}
		if plan.Budget > 0 && time.Since(began) >= plan.Budget {
			return deleted, full || asked == 0, errors.Join(corrupt...)
		}
		wait := time.NewTimer(min(pause, time.Second))
		select {
		case <-ctx.Done():
			wait.Stop()
			return deleted, true, ctx.Err()
		case <-wait.C:
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
