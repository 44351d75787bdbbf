package main

import (
	"math"
	"runtime"
	"strings"
)

// heapProfileRate is the sampling rate of the heap profile the soak reads
// (runtime.MemProfileRate): one allocation in about every 4 KiB, instead
// of Go's default 512 KiB, so that a window's few megabytes are told apart
// by owner to within a few percent.
const heapProfileRate = 4 << 10

// heapShares is the live heap by whose code allocated it, in MiB.
type heapShares struct {
	// Retrysafe is what retrysafe's packages allocated and still hold,
	// apart from Filters.
	Retrysafe float64
	// Filters are boltstore's filters of its generations' keys: about 1.3
	// bytes a record the file holds in generations, so they grow with the
	// file, as bbolt's bookkeeping does, and stop with it.
	Filters float64
	// Engine is what the store's database library allocated: bbolt's
	// page bookkeeping, pgx's connections and statement caches.
	Engine float64
	// Bench is the benchmark's own: its destination's ledger of actions,
	// its callers' latencies.
	Bench float64
	// Other was allocated by the runtime or the standard library with no
	// caller of the above on its stack.
	Other float64
}

// Owners of an allocation, by the innermost frame of its stack that
// belongs to one.
const (
	ownerNone = iota
	ownerRetrysafe
	ownerEngine
	ownerBench
	ownerFilters
)

// filtersFunc allocates the filters of boltstore's generations (see
// heapShares.Filters).
const filtersFunc = "github.com/retrysafe/retrysafe/agenttool/boltstore.newBloom"

// benchPackage is this package's path, by which its functions are named
// in its tests (and "main." in the command).
const benchPackage = "github.com/retrysafe/retrysafe/internal/bench"

// ownerOf names the owner of a function, by its full name; ownerNone for
// the runtime and the standard library, whose allocations belong to their
// caller.
func ownerOf(fn string) int {
	switch {
	case strings.HasPrefix(fn, "main."), strings.HasPrefix(fn, benchPackage+"."), strings.HasPrefix(fn, benchPackage+"_test."):
		return ownerBench
	case fn == filtersFunc:
		return ownerFilters
	case strings.HasPrefix(fn, "github.com/retrysafe/retrysafe/"):
		return ownerRetrysafe
	case strings.HasPrefix(fn, "go.etcd.io/bbolt"), strings.HasPrefix(fn, "github.com/jackc/"):
		return ownerEngine
	}
	return ownerNone
}

// liveHeapBy reads the heap profile as of the last completed garbage
// collection and adds up its live bytes by owner, scaled for sampling
// as pprof scales them. Call runtime.GC first for the heap of the moment.
// owners caches the owner of each return address from one call to the
// next.
func liveHeapBy(owners map[uintptr]int) heapShares {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	var by [5]float64
	for i := range recs {
		r := &recs[i]
		bytes, objects := float64(r.InUseBytes()), float64(r.InUseObjects())
		if bytes <= 0 || objects <= 0 {
			continue
		}
		if rate > 1 {
			bytes /= 1 - math.Exp(-bytes/objects/rate)
		}
		by[stackOwner(r.Stack(), owners)] += bytes
	}
	return heapShares{Retrysafe: mib(uint64(by[ownerRetrysafe])), Filters: mib(uint64(by[ownerFilters])), Engine: mib(uint64(by[ownerEngine])),
		Bench: mib(uint64(by[ownerBench])), Other: mib(uint64(by[ownerNone]))}
}

// stackOwner is the owner of the innermost frame of stack that has one,
// or ownerNone; owners caches each return address's owner.
func stackOwner(stack []uintptr, owners map[uintptr]int) int {
	for _, pc := range stack {
		o, ok := owners[pc]
		if !ok {
			// One address may stand for several frames, inlined into
			// each other, innermost first.
			frames := runtime.CallersFrames([]uintptr{pc})
			for more := true; more && o == ownerNone; {
				var f runtime.Frame
				f, more = frames.Next()
				o = ownerOf(f.Function)
			}
			owners[pc] = o
		}
		if o != ownerNone {
			return o
		}
	}
	return ownerNone
}
