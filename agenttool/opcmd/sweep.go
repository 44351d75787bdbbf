package opcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
)

func (r *runner) defineSweep(fs *flag.FlagSet) action {
	once := fs.Bool("once", false, "one pass, then print its report; without it, sweep every -interval until interrupted")
	interval := fs.Duration("interval", time.Minute, "the time between passes, without -once")
	rest := fs.Duration("rest", 0, "leave alone the records that changed within this time (0: none with -once, -interval without)")
	conc := fs.Int("concurrency", 4, "destinations checked at once")
	batch := fs.Int("batch", 100, "records read per page")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args); err != nil {
			return err
		}
		if *interval <= 0 || *rest < 0 || *conc <= 0 || *batch <= 0 {
			return usagef("-interval, -concurrency and -batch must be positive, and -rest not negative")
		}
		op, err := r.operator(ctx)
		if err != nil {
			return err
		}
		// Progress lines and the sweeper's log lines share stderr.
		stderr := &lockedWriter{w: r.stderr}
		opts := agenttool.SweeperOptions{
			Interval: *interval, Rest: *rest, Concurrency: *conc, Batch: *batch,
			Logger:   r.logger(stderr),
			Progress: func(rep agenttool.SweepReport) { r.printReport(stderr, rep, true) },
		}
		if !*once {
			fmt.Fprintf(stderr, "Sweeping every %v until interrupted.\n", *interval)
			err := op.RunSweeper(ctx, opts)
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				fmt.Fprintln(stderr, "Stopped.")
				return nil
			}
			return err
		}
		rep, err := op.SweepOnce(ctx, opts)
		if perr := r.printReport(r.stdout, rep, false); perr != nil {
			return perr
		}
		switch {
		case err != nil:
			return fmt.Errorf("the pass stopped early: %w", err)
		case rep.Errors > 0:
			return fmt.Errorf("%d checks or store writes failed (see the log lines above); their records stay unknown", rep.Errors)
		case rep.Corrupt > 0:
			return fmt.Errorf("%d records could not be read (see the log lines above); they are left in place", rep.Corrupt)
		}
		return nil
	}
}

// logger writes the sweeper's log lines to w: text, or JSON with -json.
func (r *runner) logger(w io.Writer) *slog.Logger {
	if r.json {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// lockedWriter serializes the writes of several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
