package agenttool_test

import (
	"path/filepath"
	"strconv"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/internal/benchtool"
)

// BenchmarkCall compares, in one run, a bare tool call with the same tool
// guarded on memstore and on boltstore, and boltstore with two bare bbolt
// Update transactions (the two durable writes a call needs). The memstore
// case keeps its store in the steady state of one swept at its key lifetime
// (benchtool.Steady).
//
//	go test -run '^$' -bench BenchmarkCall -benchmem ./agenttool/
func BenchmarkCall(b *testing.B) {
	ctx := scoped()
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		var tool benchtool.Tool
		i := 0
		for b.Loop() {
			i++
			if _, err := tool.Call(ctx, benchtool.Input(int64(i))); err != nil {
				b.Fatal(err)
			}
		}
	})
	// open returns a store; fresh is called every 4096 new actions with the
	// timer stopped, so that a memstore stays the size a swept store would
	// be, rather than growing by every benchmark iteration.
	wrapped := func(b *testing.B, open func() agenttool.Store, sameInput bool) {
		b.ReportAllocs()
		guard := func() *agenttool.Tool {
			tool, err := agenttool.Wrap(benchtool.Tool{}, agenttool.Options{Store: open(), Class: agenttool.Keyed, IdentifyingFields: benchtool.Fields})
			if err != nil {
				b.Fatal(err)
			}
			if sameInput {
				tool.Invoke(ctx, benchtool.Input(0))
			}
			return tool
		}
		tool := guard()
		i := 0
		for b.Loop() {
			if !sameInput {
				i++
				if i%4096 == 0 {
					b.StopTimer()
					tool = guard()
					b.StartTimer()
				}
			}
			if env := tool.Invoke(ctx, benchtool.Input(int64(i))); env.Status != "success" {
				b.Fatal(env)
			}
		}
	}
	mem := func() agenttool.Store { return memstore.New() }
	bolt := func() agenttool.Store { return openBolt(b, filepath.Join(b.TempDir(), "keys.db")) }
	b.Run("memstore", func(b *testing.B) {
		b.ReportAllocs()
		tool := benchtool.NewSteady()
		var i int64
		for b.Loop() {
			i++
			if env := tool.Invoke(ctx, i); env.Status != "success" {
				b.Fatal(env)
			}
		}
	})
	b.Run("memstore-replay", func(b *testing.B) { wrapped(b, mem, true) })
	b.Run("boltstore", func(b *testing.B) { wrapped(b, bolt, false) })
	b.Run("boltstore-replay", func(b *testing.B) { wrapped(b, bolt, true) })
	b.Run("bbolt-two-updates", func(b *testing.B) {
		b.ReportAllocs()
		db, err := bbolt.Open(filepath.Join(b.TempDir(), "bare.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("r")); return err })
		value := make([]byte, 200)
		i := 0
		for b.Loop() {
			i++
			key := []byte("send_email/" + strconv.Itoa(i))
			for range 2 {
				if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("r")).Put(key, value) }); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
