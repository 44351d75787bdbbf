package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/internal/canonjson"
)

func TestOwnerOfAFunctionIsItsModule(t *testing.T) {
	for fn, want := range map[string]int{
		"main.(*mailbox).send": ownerBench,
		"github.com/retrysafe/retrysafe/agenttool.(*Tool).invoke":           ownerRetrysafe,
		"github.com/retrysafe/retrysafe/agenttool/boltstore.(*Store).Claim": ownerRetrysafe,
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
