package agenttool_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
)

// benchTool is a cheap langchaingo tool: it parses its input and answers, as
// a tool in front of a fast destination would.
type benchTool struct{}

func (benchTool) Name() string        { return "send_email" }
func (benchTool) Description() string { return "Send an email." }
func (benchTool) Call(_ context.Context, in string) (string, error) {
	var e emailInput
	if err := json.Unmarshal([]byte(in), &e); err != nil {
		return "", err
	}
	return `{"message_id":"<1@mail.test>"}`, nil
}

// benchInput returns a typical tool input of about 300 bytes; i makes each
// one a distinct logical action.
func benchInput(i int) string {
	return `{"to":"user` + strconv.Itoa(i) + `@example.com","subject":"Your booking is confirmed",` +
		`"body":"Hello, your seat 14C on flight TP1234 from Lisbon to Porto on 12 December at 09:40 is confirmed.` +
		` Please arrive at the gate 30 minutes before departure. Reply to this message if anything needs to change."}`
}

// BenchmarkCall compares, in one run, a bare tool call with the same tool
// guarded on memstore and on boltstore, and boltstore with two bare bbolt
// Update transactions (the two durable writes a call needs).
//
//	go test -run '^$' -bench BenchmarkCall -benchmem ./agenttool/
func BenchmarkCall(b *testing.B) {
	ctx := scoped()
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		var tool benchTool
		i := 0
		for b.Loop() {
			i++
			if _, err := tool.Call(ctx, benchInput(i)); err != nil {
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
			tool, err := agenttool.Wrap(benchTool{}, agenttool.Options{Store: open(), Class: agenttool.Keyed})
			if err != nil {
				b.Fatal(err)
			}
			if sameInput {
				tool.Invoke(ctx, benchInput(0))
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
			if env := tool.Invoke(ctx, benchInput(i)); env.Status != "success" {
				b.Fatal(env)
			}
		}
	}
	mem := func() agenttool.Store { return memstore.New() }
	bolt := func() agenttool.Store { return openBolt(b, filepath.Join(b.TempDir(), "keys.db")) }
	b.Run("memstore", func(b *testing.B) { wrapped(b, mem, false) })
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
