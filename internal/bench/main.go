// Command bench measures retrysafe side by side with its baselines, in one
// run, and prints a table (or, with -json, one line of JSON, and the table
// on standard error; with -svg, a chart of throughput against
// concurrency).
//
//	go run ./internal/bench
//	go run ./internal/bench -json -svg docs/throughput.svg
//
// It measures: a bare tool call against the same tool guarded on memstore
// (the overhead budget), in alternating blocks, on a store held in the steady
// state of one swept at its key lifetime; a lone guarded call on boltstore against two bare
// bbolt Update transactions on the same disk; 1, 8, 64 and 256 concurrent
// callers on boltstore against plain Update and bbolt's Batch; and, when
// DATABASE_URL is set, pgstore against the bare INSERT … ON CONFLICT + UPDATE
// pair, alone and at the same concurrencies. Pairs are measured in
// alternation, so that drift in the machine's speed hits both sides alike.
// Concurrent callers act in conversations of their own. The run ends with
// each figure beside its goal (Report.Figures).
//
// With -growth it measures instead how boltstore and pgstore behave as they
// fill up (10k, 100k and 1M settled records, 1% unknown, 10% expired,
// imported through storekit.Importer): a guarded call's p50 and p99, idle
// and while a sweep of the expired 10% runs, the sweep's time, and one page
// of 50 unknown records.
//
//	go run ./internal/bench -growth -svg docs/growth.svg
//	go run ./internal/bench -growth -json
//
// With -soak it runs a busy service's load instead, for -duration (1m by
// default): -callers agents (64) calling a guarded send_email whose
// destination loses 5% of replies, refuses 5% of attempts and is slow on
// 0.5%, with a truthful reconciler that answers pending a quarter of the
// time, the sweeper every second, and records living -ttl (two thirds of
// the duration by default). It prints a line per ten-second window
// (calls/s, p50/p99, goroutines, heap, file size, unknown records, the
// sweeper's pass time, records deleted and checked), then one JSON line with
// the last-vs-first ratios. The live heap is told apart by owner, from a
// heap profile sampled every 4 KiB: retrysafe's, the database library's
// (bbolt's bookkeeping grows with its file), the benchmark's own; the
// goal of a flat heap is retrysafe's. It fails if any action was applied
// twice or any envelope lied, so it doubles as a long-running correctness
// test. It runs on boltstore, and on pgstore when DATABASE_URL is set.
//
//	go run ./internal/bench -soak                  # one minute a store
//	go run ./internal/bench -soak -duration 3m     # records living two minutes
//
// With -freelist it measures boltstore's choice of bbolt freelist: a file
// of 300,000 records of which nine in ten were deleted, its commits with
// bbolt's default freelist (a sorted array written with every commit)
// against boltstore's (a hash map, rebuilt at Open), in alternation, and
// the time each takes to open.
//
// With -pgindexes (and DATABASE_URL) it shows where a lone pgstore call's
// time goes in PostgreSQL, with no Go engine around the statements: the
// store's claim INSERT and outcome UPDATE on copies of its records table
// (all of its indexes, without each one in turn, the key alone) against
// the bare pair, in alternation.
//
//	go run ./internal/bench -pgindexes
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Report is the -json output.
type Report struct {
	// Figures are the figures of the run beside their goals.
	Figures     []Figure     `json:"figures"`
	Ratios      Ratios       `json:"ratios"`
	Memory      MemResult    `json:"memory"`
	BoltSingle  PairResult   `json:"bolt_single"`
	Concurrency []ConcResult `json:"concurrency"`
	PG          *PGResult    `json:"pg,omitempty"`
	GoVersion   string       `json:"go"`
	Started     time.Time    `json:"started"`
}

// Ratios are the figures the README quotes.
type Ratios struct {
	BoltCallVsTwoUpdates float64  `json:"bolt_call_vs_two_updates"`   // lone caller, latency
	Bolt64VsUpdate64     float64  `json:"bolt_64_vs_update_64"`       // 64 callers, throughput
	Bolt64VsBatch64      float64  `json:"bolt_64_vs_batch_64"`        // 64 callers, throughput, against bbolt's Batch
	MemOverheadNs        float64  `json:"mem_overhead_ns"`            // guarded on memstore minus bare, ns per call
	PGCallVsPair         *float64 `json:"pg_call_vs_pair,omitempty"`  // lone caller, latency
	PG64VsPair64         *float64 `json:"pg_64_vs_pair_64,omitempty"` // 64 callers, throughput
}

func main() {
	asJSON := flag.Bool("json", false, "print one line of JSON, and the table on standard error")
	svg := flag.String("svg", "", "write a chart of calls/s against concurrency to this file")
	quick := flag.Bool("quick", false, "fewer iterations: a smoke run, not figures to quote")
	growth := flag.Bool("growth", false, "the growth benchmark instead: stores of 10k, 100k and 1M records (with -quick, 1k and 10k)")
	freelist := flag.Bool("freelist", false, "boltstore's freelist choice instead: commits and Open on a file with much free space, bbolt's default freelist against boltstore's (with -quick, a smaller file)")
	soak := flag.Bool("soak", false, "the soak benchmark instead: a busy service's load on boltstore (and pgstore with DATABASE_URL)")
	duration := flag.Duration("duration", time.Minute, "with -soak: how long the load runs on each store")
	callers := flag.Int("callers", 64, "with -soak: concurrent callers")
	ttl := flag.Duration("ttl", 0, "with -soak: the records' lifetime (KeyTTL); 0 means two thirds of -duration")
	window := flag.Duration("window", 10*time.Second, "with -soak: one line per window of this length")
	boltStats := flag.Bool("boltstats", false, "with -soak: after each window on boltstore, where its commits' time went")
	pgIndexes := flag.Bool("pgindexes", false, "where a lone pgstore call's statements go instead: the store's INSERT and UPDATE on copies of its table with and without each index, against the bare pair (needs DATABASE_URL)")
	stores := flag.String("stores", "", "with -soak: comma-separated stores, bolt and pg; default bolt, and pg when DATABASE_URL is set")
	peers := flag.Bool("peers", false, "beside DBOS Transact Go instead: a DBOS workflow of one step, a guarded call, and the guarded call as the DBOS step, on one PostgreSQL, one caller and 64 (needs DATABASE_URL)")
	guard := flag.Bool("guard", false, "the guard's cost instead: a call through retrysafe guard against straight to the server, over stdio and streamable HTTP, one caller and 64")
	flag.Parse()
	if asBenchProcess() {
		return
	}
	var err error
	switch {
	case *guard:
		err = runGuard(os.Stdout, *asJSON, *quick)
	case *peers:
		if url := os.Getenv("DATABASE_URL"); url == "" {
			err = errors.New("-peers needs a PostgreSQL server: set DATABASE_URL")
		} else {
			err = runPeers(os.Stdout, *asJSON, url, *quick)
		}
	case *freelist && *quick:
		err = runFreelist(os.Stdout, *asJSON, 30_000, 500)
	case *freelist:
		err = runFreelist(os.Stdout, *asJSON, 300_000, 2000)
	case *pgIndexes:
		n := 3000
		if *quick {
			n = 100
		}
		if url := os.Getenv("DATABASE_URL"); url == "" {
			err = errors.New("-pgindexes needs a PostgreSQL server: set DATABASE_URL")
		} else {
			err = runIndexes(context.Background(), os.Stdout, *asJSON, url, n)
		}
	case *soak:
		// Before the stores allocate anything: the soak tells the live
		// heap apart by owner from the heap profile (liveHeapBy).
		runtime.MemProfileRate = heapProfileRate
		var cfg soakConfig
		if cfg, err = newSoakConfig(*duration, *callers, *ttl, *window, *stores, os.Getenv("DATABASE_URL")); err == nil {
			cfg.BoltStats = *boltStats
			lines := io.Writer(os.Stdout)
			if *asJSON {
				lines = os.Stderr
			}
			err = runSoak(os.Stdout, lines, cfg)
		}
	case *growth && *quick:
		err = runGrowth(os.Stdout, *asJSON, *svg, []int{1_000, 10_000}, 100)
	case *growth:
		err = runGrowth(os.Stdout, *asJSON, *svg, []int{10_000, 100_000, 1_000_000}, 1500)
	default:
		err = run(os.Stdout, *asJSON, *svg, *quick)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, asJSON bool, svgPath string, quick bool) error {
	dir, err := os.MkdirTemp("", "retrysafe-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	scale := 1
	if quick {
		scale = 10
	}
	progress := func(format string, args ...any) {
		if !asJSON {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		}
	}
	rep := Report{Started: time.Now().UTC(), GoVersion: goVersion()}

	progress("memory: bare vs guarded …")
	rep.Memory = measureMemory(100 / scale)
	rep.Ratios.MemOverheadNs = rep.Memory.GuardedNs - rep.Memory.BareNs

	progress("boltstore: a lone call vs two bare Updates …")
	if rep.BoltSingle, err = measureBoltSingle(filepath.Join(dir, "single"), 600/scale); err != nil {
		return err
	}
	rep.Ratios.BoltCallVsTwoUpdates = rep.BoltSingle.Ratio

	for _, c := range callers {
		progress("boltstore: %d callers …", c)
		r, err := measureBoltConcurrency(filepath.Join(dir, fmt.Sprintf("conc-%d", c)), c, max(3*c, 1200/scale))
		if err != nil {
			return err
		}
		rep.Concurrency = append(rep.Concurrency, r)
		if c == 64 {
			rep.Ratios.Bolt64VsUpdate64 = r.Guarded / r.Update
			rep.Ratios.Bolt64VsBatch64 = r.Guarded / r.Batch
		}
	}

	if url := os.Getenv("DATABASE_URL"); url != "" {
		progress("pgstore …")
		pg, err := measurePG(context.Background(), url, 1500/scale)
		if err != nil {
			return err
		}
		rep.PG = pg
		ratio := pg.Single.Ratio
		rep.Ratios.PGCallVsPair = &ratio
		if c := pg.at(64); c != nil {
			ratio := c.Guarded / c.Bare
			rep.Ratios.PG64VsPair64 = &ratio
		}
	}
	rep.Figures = figures(rep)

	if svgPath != "" {
		if err := os.WriteFile(svgPath, []byte(chart(rep)), 0o644); err != nil {
			return err
		}
	}
	if asJSON {
		printTable(os.Stderr, rep) // for people; the JSON line goes to w
		return jsonLine(w, rep)
	}
	printTable(w, rep)
	return nil
}

func jsonLine(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

func printTable(w io.Writer, rep Report) {
	line := func(cols ...string) { fmt.Fprintln(w, strings.Join(cols, " | ")) }
	fmt.Fprintf(w, "retrysafe benchmarks, %s, %s\n\n", rep.GoVersion, rep.Started.Format(time.RFC3339))
	m := rep.Memory
	line("in memory (~300-byte input)", "ns/call", "allocs/call")
	line("bare tool call", f0(m.BareNs), f0(m.BareAllocs))
	line("guarded, memstore", f0(m.GuardedNs), f0(m.GuardedAllocs))
	line("overhead", f0(m.GuardedNs-m.BareNs), f0(m.GuardedAllocs-m.BareAllocs))
	fmt.Fprintln(w)
	s := rep.BoltSingle
	line("boltstore, one caller", "µs/call")
	line("guarded call (claim + outcome)", f1(s.CallNs/1e3))
	line("two bare bbolt Update transactions", f1(s.BaselineNs/1e3))
	line("ratio (median of blocks)", f2(s.Ratio))
	fmt.Fprintln(w)
	line("boltstore, callers", "guarded calls/s", "plain Update (2 per call) calls/s", "bbolt Batch (2 per call) calls/s")
	for _, c := range rep.Concurrency {
		line(fmt.Sprint(c.Callers), f0(c.Guarded), f0(c.Update), f0(c.Batch))
	}
	if pg := rep.PG; pg != nil {
		fmt.Fprintln(w)
		line("pgstore, one caller", "µs/call")
		line("guarded call (claim + outcome)", f1(pg.Single.CallNs/1e3))
		line("bare INSERT … ON CONFLICT + UPDATE", f1(pg.Single.BaselineNs/1e3))
		line("ratio (median of blocks)", f2(pg.Single.Ratio))
		fmt.Fprintln(w)
		line("pgstore, callers", "guarded calls/s", fmt.Sprintf("bare pair calls/s (pool of %d)", pg.PoolConns),
			fmt.Sprintf("bare pair calls/s (pool of %d)", pg.WidePoolConns), "pair group-committed by hand calls/s",
			"the same on the store's table calls/s", "the store alone calls/s", "guarded / bare", "guarded / grouped", "guarded / grouped on the store's table")
		for _, c := range pg.Concurrency {
			line(fmt.Sprint(c.Callers), f0(c.Guarded), f0(c.Bare), f0(c.BareWide), f0(c.Grouped), f0(c.GroupedOnStoreTable), f0(c.StoreAlone),
				f2(c.Guarded/c.Bare), f2(c.Guarded/c.Grouped), f2(c.Guarded/c.GroupedOnStoreTable))
		}
		fmt.Fprintln(w)
		line("pgstore, callers", "this process's CPU, µs/call: guarded", "the store alone", "grouped on the store's table")
		for _, c := range pg.Concurrency {
			line(fmt.Sprint(c.Callers), f1(c.ClientCPU.Guarded), f1(c.ClientCPU.StoreAlone), f1(c.ClientCPU.GroupedOnStoreTable))
		}
		fmt.Fprintf(w, "group commit: %.1f claims and %.1f outcomes per shared commit\n", pg.ClaimsPerBatch, pg.OutcomesPerBatch)
	}
	fmt.Fprintln(w)
	printFigures(w, rep.Figures)
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }
