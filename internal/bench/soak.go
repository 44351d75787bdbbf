package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// soakConfig is the workload of the soak benchmark.
type soakConfig struct {
	Duration time.Duration // of the load
	Callers  int
	TTL      time.Duration // the records' lifetime (KeyTTL)
	Window   time.Duration // one line per window
	Interval time.Duration // between sweeper passes
	Stores   []string      // "bolt", "pg"
	URL      string        // DATABASE_URL, for "pg"
	// BoltStats prints, after each window on boltstore, where its commits'
	// time went (printBoltCommits) and the size of each of its buckets
	// (printBoltTrees).
	BoltStats bool
}

// SoakReport is the -soak -json output, and the JSON line that ends the
// soak benchmark's table.
type SoakReport struct {
	Callers   int          `json:"callers"`
	DurationS float64      `json:"duration_s"`
	TTLS      float64      `json:"ttl_s"`
	WindowS   float64      `json:"window_s"`
	Stores    []SoakResult `json:"stores"`
	GoVersion string       `json:"go"`
	Started   time.Time    `json:"started"`
}

// SoakResult is what one store did under the soak load.
type SoakResult struct {
	Store       string           `json:"store"`
	Calls       int64            `json:"calls"`
	ByStatus    map[string]int64 `json:"by_status"`
	LastVsFirst SoakRatios       `json:"last_vs_first"`
	First       SoakWindow       `json:"first_window"`
	Last        SoakWindow       `json:"last_window"`
	// WindowsWithoutChecks counts the windows after the first in which
	// the sweeper checked no unknown record.
	WindowsWithoutChecks int `json:"windows_without_checks"`
	// UnknownPeakFirstMinute is the most unknown records seen (sampled
	// every second) in the first minute of the load; UnknownAtEnd, when
	// the load stopped; UnknownAfterDrain, after the sweeper ran on alone
	// (at most 20 passes) until none was left.
	UnknownPeakFirstMinute int `json:"unknown_peak_first_minute"`
	UnknownAtEnd           int `json:"unknown_at_end"`
	UnknownAfterDrain      int `json:"unknown_after_drain"`
	DrainPasses            int `json:"drain_passes"`
	// ExpiredLeft counts the records expired when the load stopped and
	// still there once the sweeper's pass then running had ended;
	// PassStep is the most records one pass deleted in the last window.
	ExpiredLeft int `json:"expired_left"`
	PassStep    int `json:"pass_step"`
	// Effects is every effect the destination applied; Duplicates, the
	// actions it applied more than once; Lies, the envelopes that said
	// something the destination contradicts.
	Effects    int64    `json:"effects"`
	Duplicates int      `json:"duplicates"`
	Lies       int      `json:"lies"`
	LieSamples []string `json:"lie_samples,omitempty"`
	// Unrecognised counts checks of a reference the destination no longer
	// (or never) knew, answered can't say.
	Unrecognised int64 `json:"unrecognised_checks"`
	// Deleted and Checked add up the sweeper's passes during the load.
	Deleted int `json:"deleted"`
	Checked int `json:"checked"`
	// RetrysafeHeapFirst and RetrysafeHeapLast are the medians of
	// retrysafe's live heap in the first and the last third of the
	// windows, in MiB (SoakRatios.HeapRetrysafe).
	RetrysafeHeapFirst float64         `json:"retrysafe_heap_first_third_mb"`
	RetrysafeHeapLast  float64         `json:"retrysafe_heap_last_third_mb"`
	Goals              map[string]bool `json:"goals"`
}

// SoakRatios are the last window's figures over the first's.
type SoakRatios struct {
	CallsPerS  float64 `json:"calls_per_s"`
	P50        float64 `json:"p50"`
	P99        float64 `json:"p99"`
	Goroutines float64 `json:"goroutines"`
	HeapInuse  float64 `json:"heap_inuse"`
	HeapLive   float64 `json:"heap_live"`
	// HeapRetrysafe is the live heap that retrysafe's own code holds
	// (SoakWindow.HeapRetrysafe: without boltstore's filters, which
	// grow with the file's records and are shown apart), the median of the last third of the
	// windows over that of the first third: it is mostly the calls in
	// flight when the window ended, which one window catches at 0.2 MB
	// and the next at 0.5, so single windows would judge the moment, not
	// a trend.
	HeapRetrysafe float64 `json:"heap_retrysafe"`
	File          float64 `json:"file"`
}

// SoakWindow is one window of the soak benchmark.
type SoakWindow struct {
	EndS       float64 `json:"end_s"` // since the load started
	Calls      int     `json:"calls"`
	CallsPerS  float64 `json:"calls_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	Goroutines int     `json:"goroutines"`
	HeapInuse  float64 `json:"heap_inuse_mb"`
	HeapLive   float64 `json:"heap_live_mb"` // live at the window's end (after a collection)
	// The live heap by whose code allocated it (innermost frame of the
	// allocation's stack): retrysafe's packages; the store's database
	// library (bbolt, or pgx); the benchmark's own destination and
	// latencies. The rest is the runtime's. HeapRetrysafe leaves out
	// HeapFilters, boltstore's filters of its generations' keys, which
	// grow with the records the file holds (heapShares.Filters).
	HeapRetrysafe float64 `json:"heap_retrysafe_mb"`
	HeapFilters   float64 `json:"heap_filters_mb"`
	HeapEngine    float64 `json:"heap_engine_mb"`
	HeapBench     float64 `json:"heap_bench_mb"`
	FileMB        float64 `json:"file_mb"`     // the bbolt file; the records table with its indexes on PostgreSQL
	Unknown       int     `json:"unknown"`     // unknown records not yet resolved, at the window's end
	UnknownMax    int     `json:"unknown_max"` // the most seen in the window
	Passes        int     `json:"passes"`      // sweeper passes ended in the window
	PassMaxS      float64 `json:"pass_max_s"`
	PassMeanS     float64 `json:"pass_mean_s"`
	Deleted       int     `json:"deleted"` // by the sweeper's passes ended in the window
	Checked       int     `json:"checked"`
	MaxDeleted    int     `json:"pass_max_deleted"` // the most one pass deleted
}

// soakStore is a store under soak, with how to measure and drop it.
type soakStore struct {
	store agenttool.Store
	db    *bolt.DB // boltstore's
	size  func() (int64, error)
	close func()
}

func openSoakStore(kind, dir, url string) (*soakStore, error) {
	switch kind {
	case "bolt":
		path := filepath.Join(dir, "soak.db")
		s, err := boltstore.Open(path, nil)
		if err != nil {
			return nil, err
		}
		return &soakStore{store: s, db: s.DB(), close: func() { s.Close() }, size: func() (int64, error) {
			fi, err := os.Stat(path)
			if err != nil {
				return 0, err
			}
			return fi.Size(), nil
		}}, nil
	case "pg":
		if url == "" {
			return nil, errors.New("soak: the pg store needs DATABASE_URL")
		}
		b := make([]byte, 6)
		rand.Read(b)
		schema := "soak_" + hex.EncodeToString(b)
		s, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
		if err != nil {
			return nil, err
		}
		table := pgx.Identifier{schema, "records"}.Sanitize()
		return &soakStore{store: s, close: func() {
			s.Pool().Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			s.Close()
		}, size: func() (int64, error) {
			var n int64
			err := s.Pool().QueryRow(context.Background(), "SELECT pg_total_relation_size($1::regclass)", table).Scan(&n)
			return n, err
		}}, nil
	}
	return nil, fmt.Errorf("soak: no store %q (bolt, pg)", kind)
}

// runSoak runs the soak load on each store in turn, prints a line per
// window to lines as it goes, then one JSON line to w. It fails if any
// store applied an action twice or returned a lying envelope.
func runSoak(w, lines io.Writer, cfg soakConfig) error {
	dir, err := os.MkdirTemp("", "retrysafe-soak")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rep := SoakReport{Callers: cfg.Callers, DurationS: cfg.Duration.Seconds(), TTLS: cfg.TTL.Seconds(), WindowS: cfg.Window.Seconds(),
		GoVersion: goVersion(), Started: time.Now().UTC()}
	fmt.Fprintf(lines, "retrysafe soak benchmark, %s, %s: %d callers for %v, records living %v, the sweeper every %v; 5%% lost replies, 5%% failures, 0.5%% slow attempts, checks answer pending 25%% of the time\n",
		rep.GoVersion, rep.Started.Format(time.RFC3339), cfg.Callers, cfg.Duration, cfg.TTL, cfg.Interval)
	var bad []string
	for _, kind := range cfg.Stores {
		res, err := soakOne(lines, kind, filepath.Join(dir, kind), cfg)
		if err != nil {
			return err
		}
		rep.Stores = append(rep.Stores, res)
		if res.Duplicates > 0 || res.Lies > 0 {
			bad = append(bad, fmt.Sprintf("%s: %d actions applied twice, %d lying envelopes %v", kind, res.Duplicates, res.Lies, res.LieSamples))
		}
	}
	if err := jsonLine(w, rep); err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("soak: %s", strings.Join(bad, "; "))
	}
	return nil
}

// soakOne runs the load on one store.
func soakOne(lines io.Writer, kind, dir string, cfg soakConfig) (SoakResult, error) {
	res := SoakResult{Store: kind, ByStatus: map[string]int64{}, Goals: map[string]bool{}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	ss, err := openSoakStore(kind, dir, cfg.URL)
	if err != nil {
		return res, err
	}
	defer ss.close()
	mb := newMailbox()
	// The shortest lease and retry window that let records live cfg.TTL.
	lease, retry := min(10*time.Second, cfg.TTL/4), min(5*time.Second, cfg.TTL/4)
	tool, err := agenttool.New("send_email", "Send an email.", mb.send, agenttool.Options{
		Store: ss.store, Class: agenttool.Reconcilable, Reconciler: mb, KeyTTL: cfg.TTL, Lease: lease,
		Retry: agenttool.RetryPolicy{MaxElapsed: retry, InitialInterval: 20 * time.Millisecond}, AttemptTimeout: 250 * time.Millisecond,
		Hooks: agenttool.Hooks{Reconcile: mb.settled},
	})
	if err != nil {
		return res, err
	}
	op, err := agenttool.NewOperator(ss.store, tool)
	if err != nil {
		return res, err
	}
	counter, ok := ss.store.(storekit.Counter)
	if !ok {
		return res, fmt.Errorf("soak: %T cannot count unknown records", ss.store)
	}
	r := &soakRun{cfg: cfg, store: ss.store, tool: tool, mb: mb, start: time.Now()}
	r.shards = make([]shard, cfg.Callers)

	var callers sync.WaitGroup
	for i := range cfg.Callers {
		callers.Go(func() { r.caller(i) })
	}
	sweepStop := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Go(func() { r.sweep(op, sweepStop) })
	sampleStop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() { r.sampleUnknown(counter, sampleStop) })

	fmt.Fprintln(lines)
	fmt.Fprintln(lines, strings.Join([]string{kind + "store t s", "calls/s", "p50 ms", "p99 ms", "goroutines", "heap in use MB",
		"live heap MB: all, retrysafe's (+ its filters), " + engineName(kind) + "'s", "file MB", "unknown (max)", "passes", "pass max s", "deleted", "checked"}, " | "))
	var windows []SoakWindow
	var commits boltCommits
	if ss.db != nil {
		commits = readBoltCommits(ss.db)
	}
	tick := time.NewTicker(cfg.Window)
	for end := r.start.Add(cfg.Duration); ; {
		<-tick.C
		win := r.window(ss, counter)
		windows = append(windows, win)
		fmt.Fprintf(lines, "%s %.0f | %.0f | %.1f | %.1f | %d | %.1f | %.1f, %.1f (+%.1f), %.1f | %.1f | %d (%d) | %d | %.2f | %d | %d\n",
			kind, win.EndS, win.CallsPerS, win.P50Ms, win.P99Ms, win.Goroutines, win.HeapInuse, win.HeapLive, win.HeapRetrysafe, win.HeapFilters, win.HeapEngine,
			win.FileMB, win.Unknown, win.UnknownMax, win.Passes, win.PassMaxS, win.Deleted, win.Checked)
		if ss.db != nil && cfg.BoltStats {
			now := readBoltCommits(ss.db)
			printBoltCommits(lines, commits, now)
			printBoltTrees(lines, ss.db)
			commits = now
		}
		if !time.Now().Add(cfg.Window / 2).Before(end) {
			break
		}
	}
	tick.Stop()
	r.stopping.Store(true)
	loadEnd := time.Now()
	if res.UnknownAtEnd, err = counter.CountUnknown(context.Background()); err != nil {
		return res, err
	}
	callers.Wait()
	close(sampleStop)
	sampler.Wait()
	close(sweepStop) // the pass running now ends first
	sweeper.Wait()
	if res.ExpiredLeft, err = storekit.SweepAll(context.Background(), ss.store, loadEnd, 0, nil); err != nil {
		return res, err
	}
	mb.quiet(2 * time.Second)
	// The sweeper alone, until every unknown outcome is settled.
	for res.DrainPasses < 20 {
		n, err := counter.CountUnknown(context.Background())
		if err != nil {
			return res, err
		}
		if res.UnknownAfterDrain = n; n == 0 {
			break
		}
		time.Sleep(cfg.Interval)
		res.DrainPasses++
		if _, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{Interval: cfg.Interval, Rest: cfg.Interval}); err != nil {
			return res, err
		}
	}
	r.finalChecks()

	res.Calls = r.calls.Load()
	for i := range r.shards {
		for st, n := range r.shards[i].byStatus {
			res.ByStatus[st] += n
		}
	}
	mb.mu.Lock()
	res.Effects, res.Duplicates, res.Unrecognised = mb.effects, len(mb.duplicates), mb.unrecognised
	mb.mu.Unlock()
	r.lieMu.Lock()
	res.Lies, res.LieSamples = r.lies, r.lieSamples
	r.lieMu.Unlock()
	summarise(&res, windows)
	fmt.Fprintf(lines, "%sstore: %d calls, %d effects, %d duplicates, %d lies; throughput last/first %.2f; unknown: peak of the first minute %d, at the end %d, after %d passes alone %d; windows after the first without checks %d; expired left at the end %d (a pass deleted at most %d in the last window); goroutines %d → %d, live heap %.1f → %.1f MB (%s's %.1f → %.1f MB), retrysafe's %.2f → %.2f MB (medians of the first and last thirds) and its filters %.1f → %.1f MB\n",
		kind, res.Calls, res.Effects, res.Duplicates, res.Lies, res.LastVsFirst.CallsPerS, res.UnknownPeakFirstMinute, res.UnknownAtEnd,
		res.DrainPasses, res.UnknownAfterDrain, res.WindowsWithoutChecks, res.ExpiredLeft, res.PassStep,
		res.First.Goroutines, res.Last.Goroutines, res.First.HeapLive, res.Last.HeapLive,
		engineName(kind), res.First.HeapEngine, res.Last.HeapEngine, res.RetrysafeHeapFirst, res.RetrysafeHeapLast, res.First.HeapFilters, res.Last.HeapFilters)
	return res, nil
}

// engineName names the database library of a store of kind.
func engineName(kind string) string {
	if kind == "pg" {
		return "pgx"
	}
	return "bbolt"
}

// summarise fills the ratios and goals of res from its windows.
func summarise(res *SoakResult, windows []SoakWindow) {
	if len(windows) == 0 {
		return
	}
	first, last := windows[0], windows[len(windows)-1]
	res.First, res.Last = first, last
	// The goals judge the ratios as measured; the report shows them to two
	// places (0.897 is not 0.9).
	exact := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	ratio := func(a, b float64) float64 { return round2(exact(a, b)) }
	res.LastVsFirst = SoakRatios{
		CallsPerS: ratio(last.CallsPerS, first.CallsPerS), P50: ratio(last.P50Ms, first.P50Ms), P99: ratio(last.P99Ms, first.P99Ms),
		Goroutines: ratio(float64(last.Goroutines), float64(first.Goroutines)),
		HeapInuse:  ratio(last.HeapInuse, first.HeapInuse), HeapLive: ratio(last.HeapLive, first.HeapLive),
		File: ratio(last.FileMB, first.FileMB),
	}
	third := max(len(windows)/3, 1)
	ownHeap := func(ws []SoakWindow) float64 {
		var mb []float64
		for _, w := range ws {
			mb = append(mb, w.HeapRetrysafe)
		}
		return median(mb)
	}
	ownFirst, ownLast := ownHeap(windows[:third]), ownHeap(windows[len(windows)-third:])
	res.RetrysafeHeapFirst, res.RetrysafeHeapLast = ownFirst, ownLast
	res.LastVsFirst.HeapRetrysafe = ratio(ownLast, ownFirst)
	for i, win := range windows {
		res.Deleted += win.Deleted
		res.Checked += win.Checked
		if i > 0 && win.Checked == 0 {
			res.WindowsWithoutChecks++
		}
		if win.EndS <= 60.5 {
			res.UnknownPeakFirstMinute = max(res.UnknownPeakFirstMinute, win.UnknownMax)
		}
	}
	res.PassStep = last.MaxDeleted
	res.Goals = map[string]bool{
		"throughput_last_vs_first_at_least_0.9":            exact(last.CallsPerS, first.CallsPerS) >= 0.9,
		"every_window_after_the_first_checks":              res.WindowsWithoutChecks == 0,
		"unknown_at_end_at_most_first_minute":              res.UnknownAtEnd <= res.UnknownPeakFirstMinute,
		"expired_left_at_most_one_pass":                    res.ExpiredLeft <= max(res.PassStep, 1),
		"no_duplicates":                                    res.Duplicates == 0,
		"no_lies":                                          res.Lies == 0,
		"goroutines_flat_last_at_most_1.5_first":           exact(float64(last.Goroutines), float64(first.Goroutines)) <= 1.5,
		"heap_flat_retrysafe_last_third_at_most_1.5_first": exact(ownLast, ownFirst) <= 1.5,
	}
}

// newSoakConfig checks the -soak flags and fills their defaults.
func newSoakConfig(duration time.Duration, callers int, ttl, window time.Duration, stores, url string) (soakConfig, error) {
	cfg := soakConfig{Duration: duration, Callers: callers, TTL: ttl, Window: window, Interval: time.Second, URL: url}
	if cfg.TTL == 0 {
		cfg.TTL = duration * 2 / 3
	}
	switch {
	case duration < 2*window:
		return cfg, fmt.Errorf("-duration %v is shorter than two windows of %v: nothing to compare", duration, window)
	case callers < 1:
		return cfg, fmt.Errorf("-callers %d: at least one", callers)
	case cfg.TTL < 2*time.Second:
		return cfg, fmt.Errorf("-ttl %v: records must live at least 2s (the lease and the retry window fit in them)", cfg.TTL)
	}
	if stores == "" {
		stores = "bolt"
		if url != "" {
			stores += ",pg"
		}
	}
	for _, s := range strings.Split(stores, ",") {
		if s != "bolt" && s != "pg" {
			return cfg, fmt.Errorf("-stores %q: bolt or pg, separated by commas", stores)
		}
		if s == "pg" && url == "" {
			return cfg, errors.New("-stores pg needs DATABASE_URL")
		}
		cfg.Stores = append(cfg.Stores, s)
	}
	return cfg, nil
}
