package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/benchtool"
)

// input returns a typical ~300-byte tool input; i makes each a new action.
func input(i int64) string { return benchtool.Input(i) }

var scope = agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")

// callerScopes gives each concurrent caller a conversation of its own: one
// write of a tool runs at a time in a conversation (the unknown fence's
// slot), so callers sharing one would take turns.
var callerScopes = func() []context.Context {
	s := make([]context.Context, maxCallers)
	for g := range s {
		s[g] = agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-"+strconv.Itoa(g))
	}
	return s
}()

// callers are the concurrencies measured; maxCallers the largest.
var callers = []int{1, 8, 64, maxCallers}

const maxCallers = 256

func guard(store agenttool.Store) *agenttool.Tool {
	t, err := agenttool.Wrap(benchtool.Tool{}, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: benchtool.Fields})
	if err != nil {
		panic(err)
	}
	return t
}

func mustSucceed(env envelope.Envelope) {
	if env.Status != envelope.Success {
		panic(fmt.Sprintf("benchmark call failed: %s", env))
	}
}

// MemResult compares a bare call with a guarded one on memstore.
type MemResult struct {
	BareNs, GuardedNs         float64
	BareAllocs, GuardedAllocs float64
}

// measureMemory times bare and guarded calls in alternating blocks, so that
// the machine's moods fall on both alike, and reports the median block of
// each. The guarded tool's store is first filled to its steady state.
func measureMemory(rounds int) MemResult {
	const block = 2000
	var seq atomic.Int64
	var bare benchtool.Tool
	callBare := func() {
		if _, err := bare.Call(scope, input(seq.Add(1))); err != nil {
			panic(err)
		}
	}
	// A store in the steady state of one swept at its key lifetime, not
	// one that grows by every iteration.
	guarded := benchtool.NewSteady()
	callGuarded := func() { mustSucceed(guarded.Invoke(scope, seq.Add(1))) }
	for range benchtool.Live {
		callGuarded()
		callBare()
	}
	bareNs := make([]float64, rounds)
	guardedNs := make([]float64, rounds)
	for r := range rounds {
		t0 := time.Now()
		for range block {
			callBare()
		}
		t1 := time.Now()
		for range block {
			callGuarded()
		}
		bareNs[r] = float64(t1.Sub(t0).Nanoseconds()) / block
		guardedNs[r] = float64(time.Since(t1).Nanoseconds()) / block
	}
	return MemResult{
		BareNs: median(bareNs), GuardedNs: median(guardedNs),
		BareAllocs: testing.AllocsPerRun(1000, callBare), GuardedAllocs: testing.AllocsPerRun(1000, callGuarded),
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// PairResult is a latency comparison measured in alternation.
type PairResult struct {
	// CallNs and BaselineNs are the median block's time per call; Ratio
	// is the median of the blocks' ratios, each block of calls against the
	// block of baselines right after it, so that the machine's drift and a
	// stall (a checkpoint, a slow fsync) in one block do not move it.
	CallNs, BaselineNs, Ratio float64
	N                         int
}

// alternate times call and baseline in turns, n times each, in blocks of 10.
func alternate(n int, call, baseline func()) PairResult {
	var calls, bases, ratios []float64
	for done := 0; done < n; done += 10 {
		t0 := time.Now()
		for range 10 {
			call()
		}
		t1 := time.Now()
		for range 10 {
			baseline()
		}
		c, b := float64(t1.Sub(t0).Nanoseconds())/10, float64(time.Since(t1).Nanoseconds())/10
		calls, bases, ratios = append(calls, c), append(bases, b), append(ratios, c/b)
	}
	return PairResult{CallNs: median(calls), BaselineNs: median(bases), Ratio: median(ratios), N: len(calls) * 10}
}

// recordSized is a value as large as a record the store writes, so that the
// bare baseline writes as much as a guarded call does.
var recordSized = make([]byte, 420)

func openBare(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return nil, err
	}
	return db, db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists([]byte("r")); return err })
}

func twoUpdates(db *bolt.DB, key []byte) error {
	for range 2 {
		if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("r")).Put(key, recordSized) }); err != nil {
			return err
		}
	}
	return nil
}

func twoBatches(db *bolt.DB, key []byte) error {
	for range 2 {
		if err := db.Batch(func(tx *bolt.Tx) error { return tx.Bucket([]byte("r")).Put(key, recordSized) }); err != nil {
			return err
		}
	}
	return nil
}

func measureBoltSingle(path string, n int) (PairResult, error) {
	store, err := boltstore.Open(path+".retrysafe.db", nil)
	if err != nil {
		return PairResult{}, err
	}
	defer store.Close()
	db, err := openBare(path + ".bare.db")
	if err != nil {
		return PairResult{}, err
	}
	defer db.Close()
	tool := guard(store)
	var seq atomic.Int64
	var berr error
	res := alternate(n, func() { mustSucceed(tool.Invoke(scope, input(seq.Add(1)))) }, func() {
		if err := twoUpdates(db, []byte("send_email/"+strconv.FormatInt(seq.Add(1), 10))); err != nil {
			berr = err
		}
	})
	return res, berr
}

// ConcResult is throughput at one concurrency, in calls per second.
type ConcResult struct {
	Callers                int
	Guarded, Update, Batch float64
}

// fanOut runs fn n times on c goroutines, each given its number, and
// returns calls per second.
func fanOut(c, n int, fn func(g int) error) (float64, error) {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	for g := range c {
		wg.Go(func() {
			for {
				if next.Add(1) > int64(n) {
					return
				}
				if err := fn(g); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), first
}

func measureBoltConcurrency(path string, c, n int) (ConcResult, error) {
	store, err := boltstore.Open(path+".retrysafe.db", nil)
	if err != nil {
		return ConcResult{}, err
	}
	defer store.Close()
	db, err := openBare(path + ".bare.db")
	if err != nil {
		return ConcResult{}, err
	}
	defer db.Close()
	tool := guard(store)
	r := ConcResult{Callers: c}
	var seq atomic.Int64
	key := func() []byte { return []byte("send_email/" + strconv.FormatInt(seq.Add(1), 10)) }
	// Three rounds in turn, so that drift in the disk's speed hits all alike.
	var g, u, b float64
	for range 3 {
		v, err := fanOut(c, n/3, func(g int) error {
			env := tool.Invoke(callerScopes[g], input(seq.Add(1)))
			if env.Status != envelope.Success {
				return fmt.Errorf("%s", env)
			}
			return nil
		})
		if err != nil {
			return r, err
		}
		g += v / 3
		if v, err = fanOut(c, n/3, func(int) error { return twoUpdates(db, key()) }); err != nil {
			return r, err
		}
		u += v / 3
		if v, err = fanOut(c, n/3, func(int) error { return twoBatches(db, key()) }); err != nil {
			return r, err
		}
		b += v / 3
	}
	r.Guarded, r.Update, r.Batch = g, u, b
	return r, nil
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.GoVersion != "" {
		return bi.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
	}
	return runtime.Version()
}
