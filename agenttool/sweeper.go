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
	// CheckBudget bounds the time a pass spends taking up records to
	// check: those it has not reached by then wait for the next pass (a
	// check under way runs to its end; a pass takes up at least one).
	// 0 means Interval.
	CheckBudget time.Duration
	// ExpireBudget bounds the time a pass spends deleting expired records,
	// beside its checks: what is left waits for the next pass (a pass
	// makes at least one deletion step). 0 means Interval.
	ExpireBudget time.Duration
	// Behind makes the pass delete expired records without pausing
	// between full steps: the last pass fell behind expiry
	// (SweepReport.Behind). RunSweeper sets it from the last pass's report.
	Behind bool
	// Logger receives one line per failed check or pass; nil means discard.
	Logger *slog.Logger
	// Progress, if set, is called as a pass goes (after each page of
	// checks, and each step of deletions) with what the pass has done so
	// far (a command line shows it; see agenttool/opcmd), from one
	// goroutine at a time.
	Progress func(SweepReport)
}

// withDefaults fills the zero fields that have a default.
func (opts SweeperOptions) withDefaults() SweeperOptions {
	if opts.Interval <= 0 {
		opts.Interval = time.Minute
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	if opts.CheckBudget <= 0 {
		opts.CheckBudget = opts.Interval
	}
	if opts.ExpireBudget <= 0 {
		opts.ExpireBudget = opts.Interval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return opts
}

// SweepReport counts what one pass did.
type SweepReport struct {
	Expired    int // succeeded, failed and resolved records deleted after their lifetime
	Checked    int // records whose destination was asked
	Applied    int // found applied: now succeeded
	NotApplied int // found not applied: approved for one more attempt
	Unknown    int // still unknown (pending, can't say)
	Skipped    int // records of tools without a reconciler, held by a live call, or sent otherwise than their tool sends them (ErrSentOtherwise)
	Errors     int // checks or store writes that failed
	Corrupt    int // records the store could not read: skipped, reported and left in place
	// Behind is set when the pass's deletions stopped for their budget
	// with expired records left: deletion is not keeping up with expiry,
	// and the next pass should not pause (SweeperOptions.Behind).
	Behind bool
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
	opts.Interval = interval
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
				"not_applied", rep.NotApplied, "unknown", rep.Unknown, "expired", rep.Expired, "errors", rep.Errors, "behind", rep.Behind)
		}
		opts.Behind = rep.Behind
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// SweepOnce makes one pass: it asks each registered tool's reconciler about
// every record of that tool that awaits reconciliation, at most
// opts.Concurrency at a time, and settles it by the answer; and, beside the
// checks, it deletes expired records. Checks and deletions run at once, each
// under its own budget (opts.CheckBudget, opts.ExpireBudget), so that no
// backlog of expired records ever holds up a check: an unknown outcome is
// someone waiting to hear whether their action happened, a deletion only
// housekeeping. Deletion steps grow with the backlog
// (storekit.SweepExpired). Unknown records are never deleted. A record is
// deleted once it expired by the tools' clock (Options.Now) and by this
// machine's: a clock of the tools that runs ahead for a while deletes
// nothing still live when it comes back. It stops early when ctx ends.
func (o *Operator) SweepOnce(ctx context.Context, opts SweeperOptions) (SweepReport, error) {
	if o.none {
		return SweepReport{}, nil
	}
	opts = opts.withDefaults()
	began := time.Now()
	p := &pass{o: o, opts: opts}
	expired := make(chan error, 1)
	go func() { expired <- p.expire(ctx) }()
	err := p.check(ctx, began.Add(opts.CheckBudget))
	err = errors.Join(err, <-expired)
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rep, err
}

// pass is the state of one SweepOnce.
type pass struct {
	o    *Operator
	opts SweeperOptions

	mu  sync.Mutex
	rep SweepReport

	reporting sync.Mutex // Progress is called by one goroutine at a time
}

func (p *pass) count(f func(*SweepReport)) {
	p.mu.Lock()
	f(&p.rep)
	p.mu.Unlock()
}

// progress tells opts.Progress what the pass has done so far.
func (p *pass) progress() {
	if p.opts.Progress == nil {
		return
	}
	p.reporting.Lock()
	defer p.reporting.Unlock()
	p.mu.Lock()
	so := p.rep
	p.mu.Unlock()
	p.opts.Progress(so)
}

// expire deletes expired records for at most opts.ExpireBudget. Unreadable
// records are left in place and reported.
func (p *pass) expire(ctx context.Context) error {
	// As of the sooner of the tools' clock and the machine's, as
	// boltstore's writes drop generations: a deletion is for good, and the
	// action of a record deleted early runs again once the clock is back.
	n, more, err := storekit.SweepExpired(ctx, p.o.store, storekit.SweepPlan{
		Now: sooner(p.o.clock(), time.Now()), Budget: p.opts.ExpireBudget, Eager: p.opts.Behind,
		Progress: func(deleted int) {
			p.count(func(r *SweepReport) { r.Expired = deleted })
			p.progress()
		},
	})
	p.count(func(r *SweepReport) { r.Expired, r.Behind = n, more && ctx.Err() == nil })
	if keys := CorruptKeys(err); len(keys) > 0 {
		for _, k := range keys {
			p.opts.Logger.Warn("retrysafe: unreadable record left in place", "ref", k)
		}
		p.count(func(r *SweepReport) { r.Corrupt += len(keys) })
		return nil
	}
	return err
}

// check settles the records that await reconciliation, taking up none
// after deadline (but at least one: every pass checks something).
func (p *pass) check(ctx context.Context, deadline time.Time) error {
	o, opts, logger := p.o, p.opts, p.opts.Logger
	settle := func(h *holding) {
		ans, err := h.reconcile(ctx, "sweeper")
		if errors.Is(err, ErrSentOtherwise) {
			p.count(func(r *SweepReport) { r.Skipped++ })
			logger.Warn("retrysafe: sweeper left an action sent under another definition of its tool for a person to settle", "ref", h.rec.Key, "err", err)
			return
		}
		v := ans.Verdict
		p.count(func(r *SweepReport) {
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
		p.count(func(r *SweepReport) { r.Corrupt++ })
	}
	// Records that changed since restedBefore are left for a later pass.
	restedBefore := o.clock().Add(-max(opts.Rest, 0))
	if uc, ok := o.store.(storekit.UnknownClaimer); ok {
		return o.sweepClaimed(ctx, uc, opts.Concurrency, restedBefore, deadline, settle, unreadable, p.progress)
	}
	sem := make(chan struct{}, opts.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	after, taken := "", 0
	for ctx.Err() == nil {
		recs, err := o.store.ListUnknown(ctx, storekit.ListRequest{Principal: o.principal, Tool: o.tool, After: after, Limit: opts.Batch, Now: o.clock()})
		corrupt := CorruptKeys(err)
		if err != nil && len(corrupt) == 0 {
			return err
		}
		for _, k := range corrupt {
			unreadable(k)
		}
		for _, rec := range recs {
			if opts.Rest > 0 && !rec.Updated.Before(restedBefore) {
				continue // left for a later pass
			}
			t := o.tools[rec.Tool]
			if t == nil || t.cfg.Reconciler == nil || t.cfg.sentOtherwise(&rec) {
				p.count(func(r *SweepReport) { r.Skipped++ })
				continue
			}
			if taken > 0 && !time.Now().Before(deadline) {
				return nil // the rest waits for the next pass
			}
			taken++
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			wg.Go(func() {
				defer func() { <-sem }()
				h, err := t.takeOver(ctx, rec.Key)
				if err != nil {
					if errors.Is(err, ErrBusy) || errors.Is(err, ErrNotUnknown) {
						p.count(func(r *SweepReport) { r.Skipped++ })
					} else {
						logger.Warn("retrysafe: sweeper could not take over", "ref", rec.Key, "err", err)
						p.count(func(r *SweepReport) { r.Errors++ })
					}
					return
				}
				defer h.end()
				settle(h)
			})
		}
		p.progress() // the page's checks may still run
		if len(recs)+len(corrupt) < opts.Batch {
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
	return ctx.Err()
}

// sweepClaimed settles records handed out by a store that claims them in
// batches (FOR UPDATE SKIP LOCKED): concurrency records at a time, so that
// none waits for a worker while its lease runs, and none after deadline
// but the first batch.
// Records settled as still unknown in this pass are not taken again in it.
func (o *Operator) sweepClaimed(ctx context.Context, uc storekit.UnknownClaimer, conc int, restedBefore, deadline time.Time, settle func(*holding), unreadable func(key string), progress func()) error {
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
	for first := true; ctx.Err() == nil && (first || time.Now().Before(deadline)); first = false {
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
