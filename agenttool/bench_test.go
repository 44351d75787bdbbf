package agenttool_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"

	bolt "go.etcd.io/bbolt"

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
	wrapped := func(b *testing.B, store agenttool.Store, sameInput bool) {
		b.ReportAllocs()
		tool, err := agenttool.Wrap(benchTool{}, agenttool.Options{Store: store, Class: agenttool.Keyed})
		if err != nil {
			b.Fatal(err)
		}
		if sameInput {
			tool.Invoke(ctx, benchInput(0))
		}
		i := 0
		for b.Loop() {
			if !sameInput {
				i++
			}
			if env := tool.Invoke(ctx, benchInput(i)); env.Status != "success" {
				b.Fatal(env)
			}
		}
	}
	b.Run("memstore", func(b *testing.B) { wrapped(b, memstore.New(), false) })
	b.Run("memstore-replay", func(b *testing.B) { wrapped(b, memstore.New(), true) })
	b.Run("boltstore", func(b *testing.B) { wrapped(b, openBolt(b, filepath.Join(b.TempDir(), "keys.db")), false) })
	b.Run("boltstore-replay", func(b *testing.B) { wrapped(b, openBolt(b, filepath.Join(b.TempDir(), "keys.db")), true) })
	b.Run("bbolt-two-updates", func(b *testing.B) {
		b.ReportAllocs()
		db, err := bolt.Open(filepath.Join(b.TempDir(), "bare.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("r")); return err })
		value := make([]byte, 200)
		i := 0
		for b.Loop() {
			i++
			key := []byte("send_email/" + strconv.Itoa(i))
			for range 2 {
				if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("r")).Put(key, value) }); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
