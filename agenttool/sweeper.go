package agenttool

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"

	"github.com/retrysafe/retrysafe/reconcile"
)

// SweeperOptions configure [Operator.RunSweeper] and [Operator.SweepOnce]. A
// zero field takes the default in its comment.
type SweeperOptions struct {
	// Interval is the time between passes; 0 means 1m.
	Interval time.Duration
	// Rest is how long a record is left alone after it last changed (a
	// check that could not say, an attempt, a renewal) before a pass asks
	// about it: a destination that cannot answer is asked at most once per
	// Rest about a record, and people and calls can settle it in between.
	// RunSweeper uses Interval when Rest is 0; for SweepOnce, 0 means none.
	Rest time.Duration
	// Concurrency bounds the destinations checked at once; 0 means 4.
	Concurrency int
	// Batch is how many records are read per page; 0 means 100.
	Batch int
	// Logger receives one line per failed check or pass; nil means discard.
	Logger *slog.Logger
	// Progress, if set, is called after each batch of a pass with what the
	// pass has done so far (a command line shows it; see agenttool/opcmd).
	Progress func(SweepReport)
}

// SweepReport counts what one pass did.
type SweepReport struct {
	Expired    int // succeeded, failed and resolved records deleted after their lifetime
	Checked    int // records whose destination was asked
	Applied    int // found applied: now succeeded
	NotApplied int // found not applied: approved for one more attempt
	Unknown    int // still unknown (pending, can't say)
	Skipped    int // records of tools without a reconciler, or held by a live call
	Errors     int // checks or store writes that failed
	Corrupt    int // records the store could not read: skipped, reported and left in place
}

// RunSweeper runs [Operator.SweepOnce] every opts.Interval until ctx ends,
// and returns ctx's error. Several replicas may run sweepers on one shared
// store: a record is taken over by one of them at a time.
func (o *Operator) RunSweeper(ctx context.Context, opts SweeperOptions) error {
	interval := opts.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.Rest <= 0 {
		opts.Rest = interval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		rep, err := o.SweepOnce(ctx, opts)
		if err != nil && ctx.Err() == nil {
			logger.Warn("retrysafe: sweep failed", "err", err)
		} else if rep != (SweepReport{}) {
			logger.Info("retrysafe: sweep", "checked", rep.Checked, "applied", rep.Applied,
				"not_applied", rep.NotApplied, "unknown", rep.Unknown, "expired", rep.Expired, "errors", rep.Errors)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// SweepOnce deletes expired records, then asks each registered tool's
// reconciler about every record of that tool that awaits reconciliation, at
// most opts.Concurrency at a time, and settles it by the answer. Unknown
// records are never deleted. It stops early when ctx ends.
func (o *Operator) SweepOnce(ctx context.Context, opts SweeperOptions) (SweepReport, error) {
	var rep SweepReport
	if o.none {
		return rep, nil
	}
	conc, batch := opts.Concurrency, opts.Batch
	if conc <= 0 {
		conc = 4
	}
	if batch <= 0 {
		batch = 100
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n, err := storekit.SweepAll(ctx, o.store, o.clock(), 0, func(deleted int) {
		if opts.Progress != nil {
			opts.Progress(SweepReport{Expired: deleted})
		}
	})
	rep.Expired = n
	if keys := CorruptKeys(err); len(keys) > 0 {
		for _, k := range keys {
			logger.Warn("retrysafe: unreadable record left in place", "ref", k)
		}
		rep.Corrupt += len(keys)
	} else if err != nil {
		return rep, err
	}

	var mu sync.Mutex
	count := func(f func(*SweepReport)) { mu.Lock(); f(&rep); mu.Unlock() }
	progress := func() {
		if opts.Progress != nil {
			mu.Lock()
			so := rep
			mu.Unlock()
			opts.Progress(so)
		}
	}
	settle := func(h *holding) {
		ans, err := h.reconcile(ctx, "sweeper")
		v := ans.Verdict
		count(func(r *SweepReport) {
			r.Checked++
			switch {
			case err != nil:
				r.Errors++
			case v == reconcile.Applied:
				r.Applied++
			case v == reconcile.NotApplied:
				r.NotApplied++
			default:
				r.Unknown++
			}
		})
		if err != nil {
			logger.Warn("retrysafe: sweeper could not settle", "ref", h.rec.Key, "err", err)
		}
	}
	unreadable := func(key string) {
		logger.Warn("retrysafe: unreadable record skipped", "ref", key)
		count(func(r *SweepReport) { r.Corrupt++ })
	}
	// Records that changed since restedBefore are left for a later pass.
	restedBefore := o.clock().Add(-max(opts.Rest, 0))
	if uc, ok := o.store.(storekit.UnknownClaimer); ok {
		err := o.sweepClaimed(ctx, uc, conc, restedBefore, settle, unreadable, progress)
		mu.Lock()
		defer mu.Unlock()
		return rep, err
	}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	after := ""
	for ctx.Err() == nil {
		recs, err := o.store.ListUnknown(ctx, storekit.ListRequest{Principal: o.principal, Tool: o.tool, After: after, Limit: batch, Now: o.clock()})
		corrupt := CorruptKeys(err)
		if err != nil && len(corrupt) == 0 {
			wg.Wait()
			return rep, err
		}
		for _, k := range corrupt {
			unreadable(k)
		}
		for _, rec := range recs {
			if opts.Rest > 0 && !rec.Updated.Before(restedBefore) {
				continue // left for a later pass
			}
			t := o.tools[rec.Tool]
			if t == nil || t.cfg.Reconciler == nil {
				count(func(r *SweepReport) { r.Skipped++ })
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				wg.Wait()
				return rep, ctx.Err()
			}
			wg.Go(func() {
				defer func() { <-sem }()
				h, err := t.takeOver(ctx, rec.Key)
				if err != nil {
					if errors.Is(err, ErrBusy) || errors.Is(err, ErrNotUnknown) {
						count(func(r *SweepReport) { r.Skipped++ })
					} else {
						logger.Warn("retrysafe: sweeper could not take over", "ref", rec.Key, "err", err)
						count(func(r *SweepReport) { r.Errors++ })
					}
					return
				}
				defer h.end()
				settle(h)
			})
		}
		progress() // the page's checks may still run
		if len(recs)+len(corrupt) < batch {
			break
		}
		for _, k := range corrupt {
			after = max(after, k)
		}
		if len(recs) > 0 {
			after = max(after, recs[len(recs)-1].Key)
		}
	}
	wg.Wait()
	return rep, ctx.Err()
}

// sweepClaimed settles records handed out by a store that claims them in
// batches (FOR UPDATE SKIP LOCKED): concurrency records at a time, so that
// none waits for a worker while its lease runs. Records settled as still
// unknown in this pass are not taken again in it.
func (o *Operator) sweepClaimed(ctx context.Context, uc storekit.UnknownClaimer, conc int, restedBefore time.Time, settle func(*holding), unreadable func(key string), progress func()) error {
	var names []string
	lease := time.Duration(0)
	for name, t := range o.tools {
		if t.cfg.Reconciler != nil && (o.tool == "" || o.tool == name) {
			names = append(names, name)
			lease = max(lease, t.cfg.Lease)
		}
	}
	if len(names) == 0 {
		return nil
	}
	// Records settled as still unknown in this pass are not taken again:
	// they changed after the pass began.
	if now := o.clock(); now.Before(restedBefore) {
		restedBefore = now
	}
	owner := newOwner()
	for ctx.Err() == nil {
		recs, err := uc.ClaimUnknown(ctx, storekit.ClaimUnknownRequest{
			Principal: o.principal, Tools: names, Owner: owner, Now: o.clock(), Lease: lease,
			Limit: conc, UpdatedBefore: restedBefore,
		})
		corrupt := CorruptKeys(err)
		if err != nil && len(corrupt) == 0 {
			return err
		}
		for _, k := range corrupt {
			unreadable(k)
		}
		var wg sync.WaitGroup
		for _, res := range recs {
			wg.Go(func() {
				h := o.tools[res.Record.Tool].hold(ctx, res.Record, res)
				defer h.end()
				settle(h)
			})
		}
		wg.Wait()
		progress()
		if len(recs)+len(corrupt) < conc {
			return nil
		}
	}
	return ctx.Err()
}
