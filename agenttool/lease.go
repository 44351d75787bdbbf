package agenttool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// ErrLeaseLost is the cause of a holder's context when its lease could not
// be renewed in time: another call may take the key over, so the holder's
// attempt, check or compensation is stopped before that can happen.
var ErrLeaseLost = errors.New("agenttool: the lease on this key could not be renewed in time")

// keeper keeps a claim's lease for its holder — a call, or a takeover by a
// sweeper, an operator, an approver or the fence — for as long as it holds
// the key:
//
//   - it renews the lease every third of a lease, with the holder's clock;
//   - when a renewal is late or fails, it arms a deadline a margin (a sixth
//     of a lease) before the lease ends, and if no renewal has succeeded by
//     then it cancels the holder's work context with [ErrLeaseLost]; a
//     renewal refused as fenced (taken over) cancels it at once.
//
// So no attempt runs on past a lease that another call may take over. A
// quick holder costs one timer, stopped when it ends.
type keeper struct {
	t      *Tool
	base   context.Context // for renewals: the holder's, without its cancellation
	key    string
	token  uint64
	cancel context.CancelCauseFunc // cancels the holder's work

	mu       sync.Mutex
	until    time.Time   // the lease's end, as last written
	renewal  *time.Timer // the next renewal
	deadline *time.Timer // armed while a renewal is late
	stopped  bool
	// lapsed is set once the record read as stalled before a renewal
	// came (config.stalled): a call held by it may have been told that
	// its holder stopped answering.
	lapsed bool
}

// start begins keeping the lease of key held by token until until.
func (k *keeper) start(t *Tool, base context.Context, key string, token uint64, until time.Time, cancel context.CancelCauseFunc) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.t, k.base, k.key, k.token, k.until, k.cancel = t, base, key, token, until, cancel
	k.stopped = false
	k.renewal = time.AfterFunc(t.cfg.Lease/3, k.renew)
}

// stop ends the keeping: no more renewals, no cancellation.
func (k *keeper) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	if k.renewal != nil {
		k.renewal.Stop()
	}
	if k.deadline != nil {
		k.deadline.Stop()
	}
}

// extended records a renewal made by the holder itself.
func (k *keeper) extended(until time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if until.After(k.until) {
		k.until = until
		if k.deadline != nil {
			k.deadline.Stop()
		}
	}
}

// stalled reports whether the holder's record has read, at some moment up
// to now, as held by a call that stopped renewing it ([config.stalled]): a
// renewal came late, or has not come. A call held by it meanwhile may have
// been answered in_progress, "held by a call that has stopped answering",
// with a time to call again.
func (k *keeper) stalled(now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.t != nil && (k.lapsed || k.stalledAt(now))
}

// stalledAt reports whether the record, as last written, may read as
// stalled at now (the holder's clock) to a reader whose clock is up to
// ClockSkew ahead. k.mu is held.
func (k *keeper) stalledAt(now time.Time) bool {
	cfg := k.t.cfg
	return !now.Before(cfg.stallsAt(k.until.Add(-cfg.Lease), cfg.Lease).Add(-cfg.ClockSkew))
}

// leaseMargin is how long before its lease ends a holder whose renewals
// fail stops its work.
func leaseMargin(lease time.Duration) time.Duration { return lease / 6 }

func (k *keeper) renew() {
	cfg := k.t.cfg
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	now := cfg.Now()
	k.lapsed = k.lapsed || k.stalledAt(now)
	left := k.until.Sub(now) - leaseMargin(cfg.Lease)
	if left <= 0 {
		k.lose(fmt.Errorf("%w: it ends at %s", ErrLeaseLost, k.until.Format(time.RFC3339Nano)))
		k.mu.Unlock()
		return
	}
	// If this renewal does not land in time, stop the holder before its
	// lease ends.
	if k.deadline == nil {
		k.deadline = time.AfterFunc(left, k.expire)
	} else {
		k.deadline.Reset(left)
	}
	k.mu.Unlock()

	until := now.Add(cfg.Lease)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.base), cfg.StoreTimeout)
	err := cfg.Store.Renew(ctx, storekit.RenewRequest{Key: k.key, Token: k.token, Until: until, Now: now})
	cancel()

	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	switch {
	case err == nil:
		// Until it landed, readers saw the record as last written: it may
		// have read as stalled meanwhile.
		k.lapsed = k.lapsed || k.stalledAt(cfg.Now())
		k.until = until
		k.deadline.Stop()
	case errors.Is(err, storekit.ErrFenced):
		cfg.logger.Warn("retrysafe: lease taken over while held; stopping", "ref", k.key, "err", err)
		k.lose(fmt.Errorf("%w: %w", ErrLeaseLost, err))
		return
	default:
		cfg.logger.Warn("retrysafe: lease renewal failed", "ref", k.key, "err", err)
	}
	k.renewal.Reset(cfg.Lease / 3)
}

// expire fires when a late renewal has not landed by the deadline.
func (k *keeper) expire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopped && !k.t.cfg.Now().Before(k.until.Add(-leaseMargin(k.t.cfg.Lease))) {
		k.t.cfg.logger.Warn("retrysafe: lease could not be renewed in time; stopping the holder's work", "ref", k.key)
		k.lose(fmt.Errorf("%w: it ends at %s", ErrLeaseLost, k.until.Format(time.RFC3339Nano)))
	}
}

// lose cancels the holder's work and stops keeping. k.mu is held.
func (k *keeper) lose(cause error) {
	k.stopped = true
	k.renewal.Stop()
	if k.deadline != nil {
		k.deadline.Stop()
	}
	k.cancel(cause)
}
