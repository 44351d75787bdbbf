package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// soakRun is the state of one store's soak.
type soakRun struct {
	cfg      soakConfig
	store    agenttool.Store
	tool     *agenttool.Tool
	mb       *mailbox
	start    time.Time
	stopping atomic.Bool
	nextID   atomic.Int64
	calls    atomic.Int64
	shards   []shard // one per caller

	passMu sync.Mutex
	passes []passStat // ended since the last window

	unknownMax atomic.Int64 // since the last window

	lieMu      sync.Mutex
	lies       int
	lieSamples []string
	failed     bitset // actions whose last envelope was definite_failure
	lastWindow time.Time
	owners     map[uintptr]int // liveHeapBy's cache
}

type shard struct {
	mu       sync.Mutex
	latency  []time.Duration // since the last window
	byStatus map[string]int64
}

type passStat struct {
	took             time.Duration
	deleted, checked int
}

// sweep runs sweeper passes as Operator.RunSweeper does (one every
// Interval, Rest the same, Behind passed on), recording each, until stop
// is closed; a pass that runs then ends first.
func (r *soakRun) sweep(op *agenttool.Operator, stop <-chan struct{}) {
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	opts := agenttool.SweeperOptions{Interval: r.cfg.Interval, Rest: r.cfg.Interval}
	for {
		start := time.Now()
		rep, err := op.SweepOnce(context.Background(), opts)
		opts.Behind = rep.Behind
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak: sweep:", err)
		}
		r.passMu.Lock()
		r.passes = append(r.passes, passStat{took: time.Since(start), deleted: rep.Expired, checked: rep.Checked})
		r.passMu.Unlock()
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// sampleUnknown keeps the most unknown records seen, every second.
func (r *soakRun) sampleUnknown(c storekit.Counter, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if n, err := c.CountUnknown(context.Background()); err == nil {
			for {
				old := r.unknownMax.Load()
				if int64(n) <= old || r.unknownMax.CompareAndSwap(old, int64(n)) {
					break
				}
			}
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// window measures the window that ends now and starts the next.
func (r *soakRun) window(ss *soakStore, c storekit.Counter) SoakWindow {
	now := time.Now()
	from := r.lastWindow
	if from.IsZero() {
		from = r.start
	}
	r.lastWindow = now
	win := SoakWindow{EndS: round2(now.Sub(r.start).Seconds())}
	var lat []time.Duration
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		lat = append(lat, s.latency...)
		s.latency = s.latency[:0]
		s.mu.Unlock()
	}
	win.Calls = len(lat)
	win.CallsPerS = round2(float64(len(lat)) / now.Sub(from).Seconds())
	win.P50Ms = ms(percentile(lat, 50))
	win.P99Ms = ms(percentile(lat, 99))
	win.Goroutines = runtime.NumGoroutine()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	win.HeapInuse = mib(m.HeapInuse)
	// A collection now, so that the live heap and its owners are the
	// window's end's, not those of whenever the last one ran.
	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if live[0].Value.Kind() == metrics.KindUint64 {
		win.HeapLive = mib(live[0].Value.Uint64())
	}
	if r.owners == nil {
		r.owners = map[uintptr]int{}
	}
	by := liveHeapBy(r.owners)
	win.HeapRetrysafe, win.HeapFilters, win.HeapEngine, win.HeapBench = by.Retrysafe, by.Filters, by.Engine, by.Bench
	if n, err := ss.size(); err == nil {
		win.FileMB = mib(uint64(n))
	}
	if n, err := c.CountUnknown(context.Background()); err == nil {
		win.Unknown = n
	}
	win.UnknownMax = max(win.Unknown, int(r.unknownMax.Swap(0)))
	r.passMu.Lock()
	passes := r.passes
	r.passes = nil
	r.passMu.Unlock()
	var total time.Duration
	for _, p := range passes {
		win.Passes++
		total += p.took
		win.PassMaxS = max(win.PassMaxS, round2(p.took.Seconds()))
		win.Deleted += p.deleted
		win.Checked += p.checked
		win.MaxDeleted = max(win.MaxDeleted, p.deleted)
	}
	if len(passes) > 0 {
		win.PassMeanS = round2(total.Seconds() / float64(len(passes)))
	}
	return win
}

func ms(d time.Duration) float64 { return round2(float64(d.Nanoseconds()) / 1e6) }
func mib(n uint64) float64       { return round2(float64(n) / (1 << 20)) }
