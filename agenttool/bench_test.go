package agenttool_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
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

// BenchmarkWorstInputAtTheBounds measures what one call costs, in time and
// in bytes allocated, for the costliest inputs the default bounds let
// through (Options.MaxInput, 1 MiB; Options.MaxIdentifyingValue, 64 KiB):
// U+FDFA, whose loose form is 18 characters (33 bytes) for its 3 bytes,
// in every identifying value of a typed tool of three fields; in the 16
// identifying fields of a wrapped tool, which fill the input; and in
// member names up to their bound (every name is screened for keys in
// disguise, and compared loosely with its neighbours), with ASCII ones
// filling the input; then the same in ASCII.
// ms/call and MB/call are per call, KiB/input the input's size.
//
//	go test -run '^$' -bench BenchmarkWorstInputAtTheBounds ./agenttool/
func BenchmarkWorstInputAtTheBounds(b *testing.B) {
	value := func(r string, size int) string { return strings.Repeat(r, size/len(r)) }
	object := func(members func(i int) (string, string)) string {
		var in strings.Builder
		in.WriteString("{")
		for i := 0; ; i++ {
			name, v := members(i)
			if name == "" {
				break
			}
			m := strconv.Quote(name) + ":" + strconv.Quote(v)
			if in.Len()+len(m)+2 > agenttool.DefaultMaxInput {
				break
			}
			if i > 0 {
				in.WriteString(",")
			}
			in.WriteString(m)
		}
		in.WriteString("}")
		return in.String()
	}
	typed := func() *agenttool.Tool {
		tool, err := agenttool.New("send_email", "Send an email.", func(context.Context, emailInput) (string, error) { return "ok", nil },
			agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
		if err != nil {
			b.Fatal(err)
		}
		return tool
	}
	var fields []string
	for i := range 16 {
		fields = append(fields, "v"+strconv.Itoa(i))
	}
	wrapped := func() *agenttool.Tool {
		tool, err := agenttool.Wrap(benchtool.Tool{}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, IdentifyingFields: fields})
		if err != nil {
			b.Fatal(err)
		}
		return tool
	}
	for _, r := range []string{"\ufdfa", "a"} {
		chars := "U+FDFA"
		if r == "a" {
			chars = "ASCII"
		}
		email, _ := json.Marshal(emailInput{To: value(r, agenttool.DefaultMaxIdentifyingValue), Subject: value(r, agenttool.DefaultMaxIdentifyingValue),
			Body: value(r, agenttool.DefaultMaxIdentifyingValue)})
		cases := []struct {
			name  string
			tool  *agenttool.Tool
			input string
		}{
			{"typed, 3 identifying values at the bound", typed(), string(email)},
			{"wrapped, 16 identifying values filling the input", wrapped(), object(func(i int) (string, string) {
				if i == len(fields) {
					return "", ""
				}
				return fields[i], value(r, agenttool.DefaultMaxIdentifyingValue-64)
			})},
			{"wrapped, member names at their bound, and ASCII ones filling the input", wrapped(), object(func(i int) (string, string) {
				if i < len(fields) {
					return fields[i], "x"
				}
				if name := strconv.Itoa(i) + value(r, 1000); r == "a" || (i-len(fields)+1)*len(name) <= agenttool.DefaultMaxIdentifyingValue {
					return name, "x"
				}
				return strconv.Itoa(i) + value("a", 1000), "x"
			})},
		}
		for _, c := range cases {
			b.Run(chars+": "+c.name, func(b *testing.B) {
				if len(c.input) > agenttool.DefaultMaxInput {
					b.Fatalf("the input is %d bytes, past the bound", len(c.input))
				}
				if env := c.tool.Invoke(scoped(), c.input); env.Status != envelope.Success {
					b.Fatalf("the input at the bound was refused: %s", env.Error.Message)
				}
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				start := time.Now()
				for b.Loop() {
					c.tool.Invoke(scoped(), c.input)
				}
				elapsed := time.Since(start)
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(b.N), "ms/call")
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/(1<<20), "MB/call")
				b.ReportMetric(float64(len(c.input))/1024, "KiB/input")
			})
		}
	}
}
