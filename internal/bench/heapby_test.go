package main

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/internal/canonjson"
)

func TestOwnerOfAFunctionIsItsModule(t *testing.T) {
	for fn, want := range map[string]int{
		"main.(*mailbox).send": ownerBench,
		"github.com/retrysafe/retrysafe/agenttool.(*Tool).invoke":           ownerRetrysafe,
		"github.com/retrysafe/retrysafe/agenttool/boltstore.(*Store).Claim": ownerRetrysafe,
		"github.com/retrysafe/retrysafe/agenttool/boltstore.newBloom":       ownerFilters,
		"github.com/retrysafe/retrysafe/agenttool/boltstore.newBloomish":    ownerRetrysafe,
		"go.etcd.io/bbolt/internal/freelist.(*hashMap).Allocate":            ownerEngine,
		"go.etcd.io/bbolt.(*node).spill":                                    ownerEngine,
		"github.com/jackc/pgx/v5/pgconn.(*PgConn).ReceiveMessage":           ownerEngine,
		"encoding/json.Marshal":                                             ownerNone,
		"runtime.malg":                                                      ownerNone,
	} {
		if got := ownerOf(fn); got != want {
			t.Errorf("ownerOf(%q) = %d, want %d", fn, got, want)
		}
	}
}

// What a package allocates through the standard library counts as its
// own, and what it still holds after a collection is counted, scaled for
// sampling, within a few percent.
func TestLiveHeapIsToldApartByOwner(t *testing.T) {
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = heapProfileRate
	runtime.GC()
	owners := map[uintptr]int{}
	before := liveHeapBy(owners)

	// Held by this package (the benchmark's): 8 MiB in 1,000-byte pieces
	// (the 1,024-byte size class). Held by retrysafe, through canonjson,
	// which leaves room for twice its input: 16 MiB in pieces of 1,800 to
	// 2,048 bytes (the 2,048-byte size class).
	var bench [][]byte
	for range 8 << 10 {
		bench = append(bench, make([]byte, 1000))
	}
	var own [][]byte
	for range 8 << 10 {
		b, err := canonjson.Canonical([]byte(`{"b":"` + strings.Repeat("x", 900) + `","a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		own = append(own, b)
	}
	runtime.GC()
	after := liveHeapBy(owners)
	runtime.KeepAlive(bench)
	runtime.KeepAlive(own)

	if c := cap(own[0]); c <= 1792 || c > 2048 {
		t.Fatalf("canonjson's result has room for %d bytes, not the 2,048-byte size class this test counts on", c)
	}
	gotBench, gotOwn := after.Bench-before.Bench, after.Retrysafe-before.Retrysafe
	if gotBench < 7.5 || gotBench > 9 {
		t.Errorf("the benchmark's live heap grew by %.2f MiB, want about 8", gotBench)
	}
	if gotOwn < 15 || gotOwn > 17.5 {
		t.Errorf("retrysafe's live heap grew by %.2f MiB, want about 16", gotOwn)
	}
	if d := after.Engine - before.Engine; d > 0.5 {
		t.Errorf("the engines' live heap grew by %.2f MiB with no engine running", d)
	}
}

// boltstore's filters of its generations are counted apart from the rest
// of retrysafe's heap, at the bits a key Open sizes them for.
func TestTheFiltersOfGenerationsAreCountedApart(t *testing.T) {
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	// The import is sampled every 64 KiB: its many small allocations are
	// not what this counts, and sampling every one would make it slow.
	runtime.MemProfileRate = 64 << 10
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n, batch = 200_000, 5_000
	at := time.Now()
	for i := 0; i < n; i += batch {
		recs := make([]storekit.Record, 0, batch)
		for j := i; j < i+batch; j++ {
			recs = append(recs, storekit.Record{Key: fmt.Sprintf("send_email/%d", j), Tool: "send_email", State: agenttool.Succeeded, Token: 1,
				Attempts: 1, Outcome: []byte(`{}`), Created: at, Updated: at, Expires: at.Add(time.Hour)})
		}
		if err := s.Import(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Open builds one filter for the generation's keys, and every
	// allocation is sampled while it does: a filter is a few large
	// allocations of mixed sizes under one stack, which sampling every
	// 64 KiB estimates only to within a factor of two.
	runtime.MemProfileRate = 1
	runtime.GC()
	owners := map[uintptr]int{}
	before := liveHeapBy(owners)
	s, err = boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runtime.GC()
	after := liveHeapBy(owners)

	// 200,000 keys at 10 bits, in whole 64-byte blocks: 250,048 bytes.
	got := after.Filters - before.Filters
	t.Logf("filters of %d records: %.3f MiB (%.2f bytes a record); retrysafe's other heap grew by %.2f MiB", n, got, got*(1<<20)/n, after.Retrysafe-before.Retrysafe)
	if want := 250_048.0 / (1 << 20); got < want || got > want*1.01 {
		t.Errorf("the filters of %d records were counted at %.3f MiB, want %.3f MiB", n, got, want)
	}
}
