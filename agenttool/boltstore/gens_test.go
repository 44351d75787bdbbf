package boltstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Corrupt overwrites the stored form of key's record with v where the record
// lives (the records bucket, or its generation): for tests of unreadable
// records.
func Corrupt(tx *bolt.Tx, key string, v []byte) error {
	p, old := find(tx.Bucket(recordsBucket), []byte(key))
	if old == nil {
		return fmt.Errorf("no record %s to corrupt", key)
	}
	return p.records.Put([]byte(key), v)
}

// LayoutSix rewrites the store in tx as version 6 of the layout holds
// it: every record in the records bucket (pending ones and settled ones
// alike), every slot in the slots bucket, no generations and no pending
// buckets: for tests of files written before generations.
func LayoutSix(tx *bolt.Tx) error {
	b := tx.Bucket(recordsBucket)
	move := func(p place) error {
		return p.records.ForEach(func(k, v []byte) error {
			if v == nil {
				return nil
			}
			rec, err := decode(k, v)
			if err != nil {
				return err
			}
			if err := b.Put(k, v); err != nil {
				return err
			}
			if at := expiryAt(&rec); at != 0 {
				return tx.Bucket(expiryBucket).Put(expiryKey(at, rec.Key), nil)
			}
			return nil
		})
	}
	if err := move(place{records: tx.Bucket(pendingBucket)}); err != nil {
		return err
	}
	if err := forEachGen(tx, move); err != nil {
		return err
	}
	if err := tx.Bucket(pendingSlotsBucket).ForEach(func(k, v []byte) error { return tx.Bucket(slotsBucket).Put(k, v) }); err != nil {
		return err
	}
	for _, name := range [][]byte{pendingBucket, pendingSlotsBucket, gensBucket} {
		if err := tx.DeleteBucket(name); err != nil {
			return err
		}
	}
	return tx.Bucket(metaBucket).Put(schemaKey, []byte("6"))
}

// OpenTemp opens a store on a new file, closed when the test ends: for
// the package's tests, inside and out.
func OpenTemp(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// settle claims key at now and records it succeeded with a lifetime of
// ttl.
func settle(t *testing.T, s *Store, tool, key string, now time.Time, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: tool, Owner: "o", Now: now, Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("claim %s: %+v %v", key, res, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: agenttool.Succeeded, Attempts: 1,
		Outcome: []byte(`{}`), Now: now, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
}

// settleMany settles n keys of send_email at now, each with a lifetime
// of ttl, and returns them.
func settleMany(t *testing.T, s *Store, n int, now time.Time, ttl time.Duration) []string {
	t.Helper()
	var keys []string
	for i := range n {
		key := fmt.Sprintf("send_email/%03d", i)
		settle(t, s, "send_email", key, now, ttl)
		keys = append(keys, key)
	}
	return keys
}

// succeeded is a record of key that succeeded at at, with a lifetime of
// life: what a settling write or an import puts in a generation.
func succeeded(key string, at time.Time, life time.Duration) storekit.Record {
	return storekit.Record{Key: key, Tool: "t", State: agenttool.Succeeded, Token: 1, Attempts: 1,
		Outcome: []byte(`{}`), Created: at, Updated: at, Expires: at.Add(life)}
}

// places returns, for each key, where its record lives: "records",
// "pending", a generation's name in hex, or "" if it has none; and fails if a key has
// records in two places.
func places(t *testing.T, s *Store, keys ...string) []string {
	t.Helper()
	var out []string
	s.db.View(func(tx *bolt.Tx) error {
		for _, k := range keys {
			var at []string
			if tx.Bucket(recordsBucket).Get([]byte(k)) != nil {
				at = append(at, "records")
			}
			if tx.Bucket(pendingBucket).Get([]byte(k)) != nil {
				at = append(at, "pending")
			}
			forEachGen(tx, func(p place) error {
				if p.records.Get([]byte(k)) != nil {
					at = append(at, fmt.Sprintf("%x", p.gen))
				}
				return nil
			})
			if len(at) > 1 {
				t.Errorf("%s has records in %v", k, at)
			}
			out = append(out, append(at, "")[0])
		}
		return nil
	})
	return out
}

func gensLeft(s *Store) (names []string, records int) {
	s.db.View(func(tx *bolt.Tx) error {
		return forEachGen(tx, func(p place) error {
			names = append(names, fmt.Sprintf("%x", p.gen))
			records += int(p.records.Sequence())
			return nil
		})
	})
	return names, records
}

// A settled record lives in the generation of its expiry, and leaves the
// file with it, whole, once the generation's window has ended: not before,
// and counted by the sweep. A window is at most an eighth of the lifetime.
func TestGenerationsDropSettledRecordsWholeWhenTheirWindowEnds(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	const ttl = time.Hour
	keys := settleMany(t, s, 300, t0, ttl)
	at := places(t, s, keys...)
	if at[0] == "records" || at[0] == "" || slices.ContainsFunc(at, func(p string) bool { return p != at[0] }) {
		t.Fatalf("settled records of one expiry live in %v, want one generation", slices.Compact(at))
	}
	end := time.Unix(genEnd(mustHex(t, at[0])), 0)
	if exp := t0.Add(ttl); !end.After(exp) || end.Sub(exp) > ttl/8 {
		t.Fatalf("the generation ends at %v, want after the expiry %v and within an eighth of the lifetime", end, exp)
	}
	// Expired, its window not over: kept, and a claim treats it as absent.
	if n, err := s.Sweep(ctx, storekit.SweepRequest{Now: end.Add(-time.Second)}); err != nil || n != 0 {
		t.Fatalf("sweep before the window's end: %d, %v", n, err)
	}
	if _, err := s.Get(ctx, keys[0]); err != nil {
		t.Fatalf("a record went before its generation's end: %v", err)
	}
	res, err := s.Claim(ctx, storekit.ClaimRequest{Key: keys[0], Tool: "send_email", Owner: "o2", Now: end.Add(-time.Second), Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("a claim of an expired key: %+v %v", res, err)
	}
	if p := places(t, s, keys[0])[0]; p != "pending" {
		t.Fatalf("a claimed record lives in %q, want the pending bucket", p)
	}
	n, err := s.Sweep(ctx, storekit.SweepRequest{Now: end})
	if err != nil || n != len(keys)-1 {
		t.Fatalf("sweep at the window's end: %d, %v; want %d", n, err, len(keys)-1)
	}
	if names, left := gensLeft(s); len(names) != 0 || left != 0 {
		t.Fatalf("generations left: %v (%d records)", names, left)
	}
	for _, k := range keys[1:] {
		if _, err := s.Get(ctx, k); !errors.Is(err, storekit.ErrNotFound) {
			t.Fatalf("%s after its generation was dropped: %v", k, err)
		}
	}
	if _, err := s.Get(ctx, keys[0]); err != nil {
		t.Fatalf("the record claimed again went with the generation: %v", err)
	}
	if c, err := s.Count(ctx, storekit.CountRequest{}); err != nil || len(c) != 1 || c[0].Records != 1 {
		t.Fatalf("count after the drop: %+v, %v", c, err)
	}
}

// A settled record in a generation is indexed by its generation alone:
// the window orders it, so its commit writes no expiry entry (a tree of
// its own, two pages more a call). A file whose generations hold such
// entries, as earlier releases wrote them, is read, changed and swept as
// one without.
func TestGenerationsIndexTheirRecordsByTheirWindowAlone(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	const ttl = time.Hour
	keys := settleMany(t, s, 300, t0, ttl)
	entries := func() (n int) {
		s.db.View(func(tx *bolt.Tx) error {
			n += tx.Bucket(expiryBucket).Stats().KeyN
			return tx.Bucket(gensBucket).ForEachBucket(func(name []byte) error {
				if e := tx.Bucket(gensBucket).Bucket(name).Bucket(genExpiry); e != nil {
					n += e.Stats().KeyN
				}
				return nil
			})
		})
		return n
	}
	if n := entries(); n != 0 {
		t.Fatalf("%d expiry entries for %d records settled in a generation, want none", n, len(keys))
	}

	// As a file of an earlier version: every record indexed in its
	// generation too.
	gen := mustHex(t, places(t, s, keys[0])[0])
	if err := s.db.Update(func(tx *bolt.Tx) error {
		e := tx.Bucket(gensBucket).Bucket(gen).Bucket(genExpiry)
		for _, k := range keys {
			if err := e.Put(expiryKey(nanos(t0.Add(ttl)), k), nil); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	end := time.Unix(genEnd(gen), 0)
	res, err := s.Claim(ctx, storekit.ClaimRequest{Key: keys[0], Tool: "send_email", Owner: "o2", Now: end.Add(-time.Second), Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("a claim of an expired key that an old entry indexes: %+v %v", res, err)
	}
	if n, err := s.Sweep(ctx, storekit.SweepRequest{Now: end}); err != nil || n != len(keys)-1 {
		t.Fatalf("sweep at the window's end: %d, %v; want %d", n, err, len(keys)-1)
	}
	if names, left := gensLeft(s); len(names) != 0 || left != 0 {
		t.Fatalf("generations left: %v (%d records)", names, left)
	}
	if _, err := s.Get(ctx, keys[0]); err != nil {
		t.Fatalf("the record claimed again: %v", err)
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Fatalf("the file after the sweep: %v", err)
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	var b []byte
	if _, err := fmt.Sscanf(s, "%x", &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// Only plain settled records live in generations, and pending ones in the
// pending bucket: what a fence, a notice, an effect or an unknown outcome
// still needs stays in the records bucket, and a record moves when it
// changes where it belongs — never kept twice.
func TestGenerationsHoldOnlyWhatTimeAloneEnds(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	scope := agenttool.Digest{7}
	claim := func(key string, fence agenttool.Digest) uint64 {
		t.Helper()
		res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send_email", Owner: "o", Now: t0, Lease: time.Minute,
			Session: fence, FenceScope: fence})
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v %v", key, res, err)
		}
		return res.Record.Token
	}
	finish := func(key string, tok uint64, f storekit.FinishRequest) {
		t.Helper()
		f.Key, f.Token, f.Attempts, f.Outcome, f.Now, f.TTL = key, tok, 1, []byte(`{}`), t0, time.Hour
		if err := s.Finish(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	finish("plain", claim("plain", agenttool.Digest{}), storekit.FinishRequest{State: agenttool.Succeeded})
	finish("failed", claim("failed", agenttool.Digest{}), storekit.FinishRequest{State: agenttool.Failed})
	finish("unknown", claim("unknown", agenttool.Digest{}), storekit.FinishRequest{State: agenttool.Unknown})
	finish("notice", claim("notice", scope), storekit.FinishRequest{State: agenttool.Succeeded, NoticeUntil: t0.Add(time.Minute)})
	pending := claim("pending", agenttool.Digest{})
	effect := claim("effect", agenttool.Digest{})
	ectx := storekit.WithHolder(ctx, storekit.Holder{Key: "effect", Token: effect})
	if _, err := s.Effect(ectx, func(*bolt.Tx) (json.RawMessage, error) { return json.RawMessage(`1`), nil }); err != nil {
		t.Fatal(err)
	}
	finish("effect", effect, storekit.FinishRequest{State: agenttool.Succeeded})
	got := places(t, s, "plain", "failed", "unknown", "notice", "pending", "effect")
	for i, want := range []string{"gen", "gen", "records", "records", "pending", "records"} {
		if p := got[i]; p != want && (want != "gen" || p == "records" || p == "pending" || p == "") {
			t.Errorf("record %d lives in %q, want %s", i, p, want)
		}
	}
	// Settled plainly after all: it moves into a generation, and out again
	// when it is claimed anew after it expired.
	finish("pending", pending, storekit.FinishRequest{State: agenttool.Succeeded})
	if p := places(t, s, "pending")[0]; p == "records" || p == "" {
		t.Errorf("settled, the record lives in %q, want a generation", p)
	}
	later := t0.Add(2 * time.Hour)
	res, err := s.Claim(ctx, storekit.ClaimRequest{Key: "pending", Tool: "send_email", Owner: "o", Now: later, Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("claim after expiry: %+v %v", res, err)
	}
	if p := places(t, s, "pending")[0]; p != "pending" {
		t.Errorf("claimed anew, the record lives in %q, want the pending bucket", p)
	}
	if _, left := gensLeft(s); left != 2 {
		t.Errorf("the generations count %d records, want 2", left)
	}
}

// Sweep steps of a given size delete no more than asked: first from the
// generations that ended, in the order their windows ended, then one by
// one from the records bucket (records of files written before
// generations, or held by a notice), oldest expiry first; a generation
// left empty goes.
func TestSweepStepsTakeTheOldestAcrossGenerations(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	var recs []storekit.Record
	for i := range 40 {
		// Lifetimes of a minute to forty: many generations.
		exp := t0.Add(time.Duration(i+1) * time.Minute)
		recs = append(recs, storekit.Record{Key: fmt.Sprintf("k/%02d", 39-i), Tool: "t", State: agenttool.Succeeded, Token: uint64(i + 1),
			Attempts: 1, Outcome: []byte(`{}`), Created: t0, Updated: t0, Expires: exp})
	}
	if err := s.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	// One record of the records bucket, expiring among them: as a file of
	// schema 6 holds them.
	if err := s.db.Update(func(tx *bolt.Tx) error {
		r := storekit.Record{Key: "legacy", Tool: "t", State: agenttool.Succeeded, Token: 99, Attempts: 1, Outcome: []byte(`{}`),
			Created: t0, Updated: t0, Expires: t0.Add(90 * time.Second)}
		if err := tx.Bucket(recordsBucket).Put([]byte(r.Key), encode(&r)); err != nil {
			return err
		}
		return tx.Bucket(expiryBucket).Put(expiryKey(nanos(r.Expires), r.Key), nil)
	}); err != nil {
		t.Fatal(err)
	}
	names, _ := gensLeft(s)
	if len(names) < 5 {
		t.Fatalf("%d generations, want many", len(names))
	}
	var order []string
	at := t0.Add(2 * time.Hour)
	for {
		before, _, _ := s.Export(ctx, "", 100)
		n, err := s.Sweep(ctx, storekit.SweepRequest{Now: at, Limit: 3})
		if err != nil || n > 3 {
			t.Fatalf("step: %d, %v", n, err)
		}
		if n == 0 {
			break
		}
		after, _, _ := s.Export(ctx, "", 100)
		for _, r := range before {
			if !slices.ContainsFunc(after, func(a storekit.Record) bool { return a.Key == r.Key }) {
				order = append(order, r.Key)
			}
		}
	}
	// Generations in the order of their names (their windows' ends), each
	// in key order; then the records bucket.
	slices.SortFunc(recs, func(a, b storekit.Record) int {
		if c := bytes.Compare(genName(a.Expires, a.Updated), genName(b.Expires, b.Updated)); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	var want []string
	for _, r := range recs {
		want = append(want, r.Key)
	}
	want = append(want, "legacy")
	// Within a step, keys of one step come out in key order: compare by
	// steps of three.
	if len(order) != len(want) {
		t.Fatalf("swept %d records, want %d", len(order), len(want))
	}
	for i := 0; i < len(want); i += 3 {
		g, w := slices.Clone(order[i:min(i+3, len(order))]), slices.Clone(want[i:min(i+3, len(want))])
		slices.Sort(g)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			t.Fatalf("step %d swept %v, want the oldest %v", i/3, g, w)
		}
	}
	if names, left := gensLeft(s); len(names) != 0 || left != 0 {
		t.Fatalf("generations left after every record went: %v (%d)", names, left)
	}
}

// Export pages through every place in key order, whatever the page size.
func TestExportMergesGenerationsByKey(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Now()
	var recs []storekit.Record
	var want []string
	for i := range 50 {
		key := fmt.Sprintf("k/%02d", i)
		r := storekit.Record{Key: key, Tool: "t", State: agenttool.Succeeded, Token: uint64(i + 1), Attempts: 1, Outcome: []byte(`{}`),
			Created: t0, Updated: t0, Expires: t0.Add(time.Duration(1+i%7) * time.Hour)}
		if i%5 == 0 {
			r.State = agenttool.Unknown // in the records bucket
			r.Expires = time.Time{}
		}
		recs = append(recs, r)
		want = append(want, key)
	}
	if err := s.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1, 3, 7, 50, 100} {
		var got []string
		after := ""
		for {
			page, next, err := s.Export(ctx, after, size)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page {
				got = append(got, r.Key)
			}
			if next == "" {
				break
			}
			after = next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pages of %d: %v", size, got)
		}
	}
}

// A lookup of a key with no record — every new action's claim makes one —
// must learn that no generation holds it: its cost against their number
// and size, with the generations' filters and walking every generation's
// tree. With a sweeper, a store holds eight to seventeen generations per
// lifetime in use; without one, writes keep them to maxGenerations and
// those not yet ended.
func BenchmarkLookupOfANewKeyAmongGenerations(b *testing.B) {
	for _, c := range []struct{ gens, each int }{{0, 0}, {16, 1}, {16, 4000}, {maxGenerations, 1}} {
		for _, walk := range []bool{false, true} {
			name := fmt.Sprintf("generations=%d/records=%d/filters", c.gens, c.gens*c.each)
			if walk {
				name = fmt.Sprintf("generations=%d/records=%d/walk", c.gens, c.gens*c.each)
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				s := OpenTemp(b)
				t0 := time.Unix(1_780_000_000, 0)
				var recs []storekit.Record
				for i := range c.gens {
					// Lifetimes of 80 s: windows of 8 s.
					at := t0.Add(time.Duration(i) * 8 * time.Second)
					for j := range c.each {
						recs = append(recs, succeeded(fmt.Sprintf("k/%d/%d", i, j), at, 80*time.Second))
					}
				}
				if err := s.Import(ctx, recs); err != nil {
					b.Fatal(err)
				}
				if names, _ := gensLeft(s); len(names) != c.gens {
					b.Fatalf("%d generations, want %d", len(names), c.gens)
				}
				if walk {
					forgetFilters(s.db)
				}
				b.ResetTimer()
				for i := range b.N {
					if _, err := s.Get(ctx, fmt.Sprintf("new/%d", i)); !errors.Is(err, storekit.ErrNotFound) {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/lookup")
			})
		}
	}
}

// Without a sweeper, writes keep the generations to maxGenerations and
// those not yet ended: a new generation first drops those that ended by
// the time of its write, so lookups stay quick and nothing live goes.
func TestGenerationsStayFewWithoutASweeper(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	const ttl = 80 * time.Second // windows of 8 s
	var last time.Time
	for i := range 5 * maxGenerations {
		key := fmt.Sprintf("k/%04d", i)
		now := t0.Add(time.Duration(i) * 8 * time.Second)
		settle(t, s, "t", key, now, ttl)
		if names, _ := gensLeft(s); len(names) > maxGenerations+1 {
			t.Fatalf("after %d writes, %d generations", i+1, len(names))
		}
		last = now
	}
	names, held := gensLeft(s)
	var counted uint64
	s.db.View(func(tx *bolt.Tx) error { counted = tx.Bucket(gensBucket).Sequence(); return nil })
	if int(counted) != len(names) {
		t.Errorf("the generations are counted %d, and %d are in the file", counted, len(names))
	}
	live := 0
	for i := range 5 * maxGenerations {
		key := fmt.Sprintf("k/%04d", i)
		at := t0.Add(time.Duration(i) * 8 * time.Second)
		_, err := s.Get(ctx, key)
		switch expired := !last.Before(at.Add(ttl)); {
		case !expired && err != nil:
			t.Errorf("%s, not expired at the last write, went: %v", key, err)
		case !expired:
			live++
		}
	}
	if held < live {
		t.Errorf("the generations hold %d records, fewer than the %d live ones", held, live)
	}
}

// A record whose settling time is unknown (imported without one) gets a
// window of a second, not one as long as the time since 1970.
func TestGenerationsOfRecordsWithoutASettlingTime(t *testing.T) {
	exp := time.Unix(1_780_000_000, 500)
	for _, settled := range []time.Time{{}, exp.Add(time.Hour)} {
		name := genName(exp, settled)
		if end, width := genEnd(name), name[8]; width != 0 || end != exp.Unix()+1 {
			t.Errorf("settled %v: window of 2^%d s ending at %d; want a second, ending at %d", settled, width, end, exp.Unix()+1)
		}
	}
	if name := genName(time.Unix(1<<40, 0), time.Unix(0, 0)); genEnd(name) <= maxNanos.Unix() {
		t.Errorf("a lifetime past the range of nanoseconds ends at %d, before the time it is stored as", genEnd(name))
	}
}

// A step deletes one by one SweepGrowth times the store's own step at
// most, whatever it is asked: a first step that dropped whole generations
// counts their records, and the steps storekit.SweepExpired sizes from it
// must not stall calls behind a transaction of thousands of deletions.
func TestSweepStepsDeleteOneByOneABoundedNumber(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	if err := s.db.Update(func(tx *bolt.Tx) error {
		for i := range 1000 { // as a file of schema 6 holds them
			r := storekit.Record{Key: fmt.Sprintf("legacy/%04d", i), Tool: "t", State: agenttool.Succeeded, Token: uint64(i + 1), Attempts: 1,
				Outcome: []byte(`{}`), Created: t0, Updated: t0, Expires: t0.Add(time.Minute)}
			if err := tx.Bucket(recordsBucket).Put([]byte(r.Key), encode(&r)); err != nil {
				return err
			}
			if err := tx.Bucket(expiryBucket).Put(expiryKey(nanos(r.Expires), r.Key), nil); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n, err := s.Sweep(ctx, storekit.SweepRequest{Now: t0.Add(time.Hour), Limit: 5000})
	if err != nil || n != storekit.SweepGrowth*sweepStep {
		t.Fatalf("a step asked for 5000: %d, %v; want %d", n, err, storekit.SweepGrowth*sweepStep)
	}
	total, err := storekit.SweepAll(ctx, s, t0.Add(time.Hour), 0, nil)
	if err != nil || n+total != 1000 {
		t.Fatalf("then SweepAll: %d, %v; want the other %d", total, err, 1000-n)
	}
}

// An import drops no generation: importing a record settled in the future
// (a copy from a machine whose clock ran ahead) ends no window that has
// not ended here.
func TestGenerationsOutliveARecordFromTheFuture(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	now := time.Now()
	var recs []storekit.Record
	for i := range maxGenerations {
		// Lifetimes of an hour (windows of 256 s), one record in each.
		at := now.Add(time.Duration(i) * 300 * time.Second)
		recs = append(recs, storekit.Record{Key: fmt.Sprintf("k/%02d", i), Tool: "t", State: agenttool.Succeeded, Token: uint64(i + 1),
			Attempts: 1, Outcome: []byte(`{}`), Created: at, Updated: at, Expires: at.Add(time.Hour)})
	}
	if err := s.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if names, _ := gensLeft(s); len(names) < maxGenerations {
		t.Fatalf("%d generations, want at least %d", len(names), maxGenerations)
	}
	ahead := now.Add(10 * 365 * 24 * time.Hour)
	if err := s.Import(ctx, []storekit.Record{{Key: "ahead", Tool: "t", State: agenttool.Succeeded, Token: 999, Attempts: 1,
		Outcome: []byte(`{}`), Created: ahead, Updated: ahead, Expires: ahead.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if _, err := s.Get(ctx, r.Key); err != nil {
			t.Fatalf("%s, live here, went when a record from the future was imported: %v", r.Key, err)
		}
	}
}

// A write drops only generations that have ended by the machine's clock
// too: a write stamped a day ahead (a caller's clock that jumped, an
// operator's that is skewed) leaves the records that have not expired by
// the clock of this process, so their actions still replay when the
// caller's clock comes back.
func TestAWriteAheadOfTheClockDropsNoLiveGeneration(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Now().Truncate(time.Second)
	const ttl = 80 * time.Second // windows of 8 s, the first ending 80 s from now
	for i := range maxGenerations {
		settle(t, s, "t", fmt.Sprintf("k/%04d", i), t0.Add(time.Duration(i)*8*time.Second), ttl)
	}
	settle(t, s, "t", "ahead", t0.Add(24*time.Hour), ttl)
	for i := range maxGenerations {
		key := fmt.Sprintf("k/%04d", i)
		if _, err := s.Get(ctx, key); err != nil {
			t.Fatalf("%s, expiring %v from now, went with a write stamped a day ahead: %v", key, time.Duration(i)*8*time.Second+ttl, err)
		}
	}
}

// The slot a pending record holds is indexed apart from those of unknown
// outcomes and notices, and moves with its record's state: one entry per
// slot, always. A file of an earlier layout keeps pending records' slots
// with the others, and they move when the record is next written.
func TestSlotsOfPendingRecordsLiveApart(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	fence := agenttool.Digest{5}
	slot := slotKey(storekit.Slot{Tool: "t", Scope: fence})
	where := func() (pending, other string) {
		s.db.View(func(tx *bolt.Tx) error {
			pending, other = string(tx.Bucket(pendingSlotsBucket).Get(slot)), string(tx.Bucket(slotsBucket).Get(slot))
			return nil
		})
		return
	}
	want := func(when, pending, other string) {
		t.Helper()
		if p, o := where(); p != pending || o != other {
			t.Errorf("%s: the slot is held by %q among pending records' slots and %q among the others; want %q and %q", when, p, o, pending, other)
		}
	}
	claim := func(key string, now time.Time) storekit.ClaimResult {
		t.Helper()
		res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "t", Owner: "o", Now: now, Lease: time.Minute, Session: fence, FenceScope: fence,
			TakeOver: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := claim("a", t0)
	want("claimed", "a", "")
	if err := s.Finish(ctx, storekit.FinishRequest{Key: "a", Token: res.Record.Token, State: agenttool.Unknown, Attempts: 1, Now: t0, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	want("unknown", "", "a")
	later := t0.Add(time.Hour)
	if res = claim("a", later); !res.Claimed || !res.TookOver {
		t.Fatalf("a retry of the unknown action: %+v", res)
	}
	want("taken over", "a", "")
	if err := s.Finish(ctx, storekit.FinishRequest{Key: "a", Token: res.Record.Token, State: agenttool.Succeeded, Attempts: 2, Outcome: []byte(`{}`),
		Now: later, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	want("settled", "", "")
	// As an earlier layout left it: a pending record's slot among the others.
	res = claim("b", later)
	if err := s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(pendingSlotsBucket).Delete(slot); err != nil {
			return err
		}
		return tx.Bucket(slotsBucket).Put(slot, []byte("b"))
	}); err != nil {
		t.Fatal(err)
	}
	if other := claim("c", later); other.Claimed {
		t.Fatalf("a claim of the scope while b holds its slot among the others: %+v", other)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: "b", Token: res.Record.Token, State: agenttool.Succeeded, Attempts: 1, Outcome: []byte(`{}`),
		Now: later, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	want("settled after an earlier layout", "", "")
}

// A claim sees its slot's holder in whichever bucket it is indexed,
// whatever the other bucket says: a stale entry among the pending records'
// slots (a record settled by a writer that kept every slot in the slots
// bucket) must not hide an unknown action indexed among the others — a
// new write of the scope waits for it.
func TestAStaleEntryAmongPendingSlotsHidesNoHolder(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	t0 := time.Unix(1_780_000_000, 0)
	fence := agenttool.Digest{6}
	slot := slotKey(storekit.Slot{Tool: "t", Scope: fence})
	claim := func(key string) storekit.ClaimResult {
		t.Helper()
		res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "t", Owner: key, Now: t0, Lease: time.Minute, Session: fence, FenceScope: fence})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	finish := func(res storekit.ClaimResult, state agenttool.State) {
		t.Helper()
		if !res.Claimed {
			t.Fatalf("a claim of %s: %+v", res.Record.Key, res)
		}
		if err := s.Finish(ctx, storekit.FinishRequest{Key: res.Record.Key, Token: res.Record.Token, State: state, Attempts: 1, Outcome: []byte(`{}`),
			Now: t0, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	finish(claim("p"), agenttool.Succeeded)
	finish(claim("a"), agenttool.Unknown)
	// As the earlier build leaves the file: p, settled by it, still named
	// among the pending records' slots; a, unknown, among the others.
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(pendingSlotsBucket).Put(slot, []byte("p")) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path, nil); err != nil {
		t.Fatal(err)
	}
	res := claim("c")
	if res.Claimed || res.Blocked == nil || res.Blocked.Key != "a" {
		t.Fatalf("a new write of the scope while a is unknown: claimed %v, blocked by %+v; want it held back by a", res.Claimed, res.Blocked)
	}
}

// bigGeneration imports n settled records whose lifetimes end together,
// into one generation, and returns the time its window has ended by.
func bigGeneration(t testing.TB, s *Store, n int) time.Time {
	t.Helper()
	t0 := time.Unix(1_780_000_000, 0)
	for i := 0; i < n; {
		var recs []storekit.Record
		for ; i < n && len(recs) < 10_000; i++ {
			recs = append(recs, storekit.Record{Key: fmt.Sprintf("send/%07d", i), Tool: "send", State: agenttool.Succeeded, Token: uint64(i + 1),
				Attempts: 1, Outcome: []byte(`{"message_id":"<1@mail.example>"}`), Created: t0, Updated: t0, Expires: t0.Add(time.Hour)})
		}
		if err := s.Import(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
	}
	if names, left := gensLeft(s); len(names) != 1 || left != n {
		t.Fatalf("%d generations of %d records, want one of %d", len(names), left, n)
	}
	return t0.Add(2 * time.Hour)
}

// A generation too big to free in one short commit is cut down over
// several steps, none deleting more than its bound, and goes whole once
// what is left is small; every record goes, counted once, and none is
// found meanwhile.
//
// A generation of 100,000 records was dropped in one commit that freed
// its 40,000 pages: 6 ms on a quiet machine, 30 ms on a busy one, and
// every call waited behind it (the growth benchmark's p99 during a sweep,
// 25 times the idle one).
func TestABigGenerationGoesOverStepsOfBoundedSize(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	const n = 3*genWhole + 100
	at := bigGeneration(t, s, n)
	total, steps, claimed := 0, 0, 0
	for {
		got, err := s.Sweep(ctx, storekit.SweepRequest{Now: at})
		if err != nil {
			t.Fatal(err)
		}
		if got > max(genStep, genWhole) {
			t.Fatalf("a step of the store's own size deleted %d records; at most %d", got, max(genStep, genWhole))
		}
		if got == 0 {
			break
		}
		total += got
		steps++
		if _, left := gensLeft(s); left != n-total-claimed {
			t.Fatalf("after %d steps: %d deleted, %d left in the generation; want %d", steps, total, left, n-total-claimed)
		}
		if steps == 1 {
			// A key of the half-cut generation that is still there is
			// expired, as before: a new action may claim it.
			key := fmt.Sprintf("send/%07d", n-1)
			res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send", Fingerprint: storekit.Digest{1}, Owner: "o", Now: at, Lease: time.Minute})
			if err != nil || !res.Claimed || res.TookOver {
				t.Fatalf("claiming %s, expired, while its generation is cut: %+v, %v; want a new claim", key, res, err)
			}
			claimed = 1 // it moved to the pending records
		}
	}
	if total != n-claimed {
		t.Errorf("the sweep deleted %d records; the generation held %d", total, n-claimed)
	}
	if want := (n-claimed-genWhole+genStep-1)/genStep + 1; steps != want {
		t.Errorf("%d steps; want %d: cuts of %d until %d are left, then the rest whole", steps, want, genStep, genWhole)
	}
	if names, left := gensLeft(s); len(names) != 0 || left != 0 {
		t.Errorf("generations left: %v (%d records)", names, left)
	}
	// Steps of a given size delete no more than asked, from a generation as from the records bucket.
	at = bigGeneration(t, s, 2*genWhole)
	for {
		got, err := s.Sweep(ctx, storekit.SweepRequest{Now: at, Limit: 300})
		if err != nil || got > 300 {
			t.Fatalf("a step asked for 300 deleted %d (%v)", got, err)
		}
		if got == 0 {
			break
		}
	}
	if names, left := gensLeft(s); len(names) != 0 || left != 0 {
		t.Errorf("generations left: %v (%d records)", names, left)
	}
}

// What a sweep step costs a record of an ended generation: dropped whole,
// and cut from its start (what genStep and genWhole are sized by).
func BenchmarkSweepOfAnEndedGeneration(b *testing.B) {
	for _, way := range []string{"whole", "cut"} {
		b.Run(way, func(b *testing.B) {
			const n = 20_000
			var took time.Duration
			for b.Loop() {
				b.StopTimer()
				s := OpenTemp(b)
				at := bigGeneration(b, s, n)
				b.StartTimer()
				start := time.Now()
				err := s.db.Update(func(tx *bolt.Tx) error {
					if way == "whole" {
						_, err := dropEnded(tx, at, n, 0)
						return err
					}
					_, err := dropEnded(tx, at, n-1, 0)
					return err
				})
				took += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(took.Nanoseconds())/float64(b.N*n), "ns/record")
		})
	}
}

// Without a sweeper, the rule of maxGenerations holds even when a
// generation that ended is too big to go in one step: a write that starts
// a generation in a full file takes at least one generation away, so
// lookups (which walk every ended generation: its filter is forgotten)
// stay quick.
func TestGenerationsStayFewWithoutASweeperBehindABigEndedOne(t *testing.T) {
	s := OpenTemp(t)
	ended := bigGeneration(t, s, 3*genWhole)
	const ttl = 80 * time.Second // windows of 8 s
	for i := range 2 * maxGenerations {
		now := ended.Add(time.Duration(i) * 8 * time.Second)
		settle(t, s, "t", fmt.Sprintf("k/%04d", i), now, ttl)
		if names, _ := gensLeft(s); len(names) > maxGenerations+1 {
			t.Errorf("after %d writes, %d generations; want at most %d", i+1, len(names), maxGenerations+1)
			return
		}
	}
}

// While a big generation that ended is cut down over steps, keys move out
// of it (claimed again), back in (a write whose clock is behind puts a
// record in its window again) and are written into it anew: each step
// counts what it deleted, each generation's count stays the keys it
// holds, and no live record goes.
func TestAGenerationCutWhileKeysMoveInAndOutCountsTrueAndKeepsTheLive(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	const n = genWhole + 4*genStep
	at := bigGeneration(t, s, n)
	t0 := time.Unix(1_780_000_000, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	actual := func() (total int) {
		t.Helper()
		s.db.View(func(tx *bolt.Tx) error {
			return forEachGen(tx, func(p place) error {
				keys := 0
				p.records.ForEach(func(k, v []byte) error { keys++; return nil })
				if int(p.records.Sequence()) != keys {
					t.Fatalf("generation %x counts %d records and holds %d", p.gen, p.records.Sequence(), keys)
				}
				total += keys
				return nil
			})
		})
		return total
	}
	live := map[string]bool{}
	for step := 0; ; step++ {
		for range 20 {
			key := fmt.Sprintf("send/%07d", rng.IntN(n+100))
			switch rng.IntN(3) {
			case 0: // written (again) into the ended window, by a clock that is behind
				if err := s.db.Update(func(tx *bolt.Tx) error {
					b := tx.Bucket(recordsBucket)
					prev, err := load(b, key)
					if err != nil || (prev != nil && live[key]) {
						return err
					}
					r := succeeded(key, t0, time.Hour)
					r.Tool = "send"
					return saveAt(b, &r, prev, time.Time{})
				}); err != nil {
					t.Fatal(err)
				}
			case 1: // claimed again and settled for a day: out of the window, live
				if live[key] {
					continue
				}
				res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send", Fingerprint: storekit.Digest{1}, Owner: "o", Now: at, Lease: time.Minute})
				if err != nil || !res.Claimed {
					t.Fatalf("claim %s: %+v %v", key, res, err)
				}
				if err := s.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: agenttool.Succeeded, Attempts: 1,
					Outcome: []byte(`{}`), Now: at, TTL: 24 * time.Hour}); err != nil {
					t.Fatal(err)
				}
				live[key] = true
			case 2: // claimed again and left pending
				if live[key] {
					continue
				}
				res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send", Fingerprint: storekit.Digest{1}, Owner: "o", Now: at, Lease: time.Hour})
				if err != nil || !res.Claimed {
					t.Fatalf("claim %s: %+v %v", key, res, err)
				}
				live[key] = true
			}
		}
		before := actual()
		req := storekit.SweepRequest{Now: at}
		if rng.IntN(2) == 0 {
			req.Limit = 1 + rng.IntN(400)
		}
		got, err := s.Sweep(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if after := actual(); before-after != got {
			t.Fatalf("step %d (limit %d) said it deleted %d; the generations lost %d", step, req.Limit, got, before-after)
		}
		for key := range live {
			if _, err := s.Get(ctx, key); err != nil {
				t.Fatalf("step %d: %s, live, went: %v", step, key, err)
			}
		}
		if got == 0 {
			break
		}
	}
	names, left := gensLeft(s)
	if len(names) != 1 || left != len(live)-countPending(t, s) {
		t.Errorf("left: %v, %d records; want the one live generation", names, left)
	}
}

func countPending(t *testing.T, s *Store) (n int) {
	t.Helper()
	s.db.View(func(tx *bolt.Tx) error { n = tx.Bucket(pendingBucket).Stats().KeyN; return nil })
	return n
}

// A file of schema 10 kept a record closed as replaced that keeps a mark
// in a generation, out of the beside index, and one of schema 11 such a
// record of a tool fenced by session: opened by this version, it moves
// out and is indexed, and holds back its conversation's next write for a
// model as on a new file. (Found by reviews: the upgrade left it where it
// was, and the write went on.)
func TestUpgradeFromSchema10IndexesAClosedMarkAGenerationHeld(t *testing.T) {
	for _, tc := range []struct {
		schema    string
		bySession bool
	}{{"10", false}, {"11", true}} {
		t.Run(tc.schema, func(t *testing.T) { upgradeIndexesAClosedMark(t, tc.schema, tc.bySession) })
	}
}

// closedMark makes, in a new file, C (conversation 9) approved for one
// more attempt, X in its place — under a principal's fence another
// conversation's, under a session's C's own — and C marked as standing in
// for an action proved applied: a record closed as replaced that keeps a
// mark, unheard. It returns the open store, the file's path, and claims of
// the tool at that fence.
func closedMark(t *testing.T, bySession bool) (*Store, string, func(key string, session agenttool.Digest, now time.Time) storekit.ClaimRequest) {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	alice, s9, s10 := agenttool.Digest{0xa1}, agenttool.Digest{0x59, 9}, agenttool.Digest{0x59, 10}
	const tool = "send_email"
	if bySession {
		s10 = s9
	}
	req := func(key string, session agenttool.Digest, now time.Time) storekit.ClaimRequest {
		scope := alice
		if bySession {
			scope = session
		}
		return storekit.ClaimRequest{Key: key, Tool: tool, Principal: alice, Session: session, Fingerprint: agenttool.Digest{1},
			Owner: "o-" + key, Now: now, Lease: time.Minute, FenceScope: scope, NoticeHold: 10 * time.Second}
	}
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, req("C", s9, t0))
	if err != nil || !c.Claimed {
		t.Fatal(c, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: "C", Token: c.Record.Token, State: agenttool.Unknown, Attempts: 1, Now: t0, RetryApproved: true, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	xr := req("X", s10, t0.Add(time.Second))
	xr.Replace = &storekit.Replacement{Key: "C", Attempts: 1, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	x, err := s.Claim(ctx, xr)
	if err != nil || !x.Claimed {
		t.Fatal(x, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: "X", Token: x.Record.Token, State: agenttool.Failed, Attempts: 1, Now: t0.Add(2 * time.Second), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mark(ctx, storekit.MarkRequest{Key: "C", Session: s9, Until: storekit.UntilTold, For: tool + "/A", Now: t0.Add(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	return s, path, req
}

func upgradeIndexesAClosedMark(t *testing.T, schema string, bySession bool) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s9 := agenttool.Digest{0x59, 9}
	s, path, req := closedMark(t, bySession)
	var err error
	// As that version left it: C in a generation, in no beside index.
	if err := s.DB().Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(recordsBucket)
		from, v := find(b, []byte("C"))
		rec, err := decode([]byte("C"), v)
		if err != nil {
			return err
		}
		if err := from.del([]byte("C"), expiryAt(&rec)); err != nil {
			return err
		}
		g, err := genFor(tx, genName(rec.Expires, rec.Updated), time.Time{})
		if err != nil {
			return err
		}
		if err := g.put([]byte("C"), encode(&rec)); err != nil {
			return err
		}
		if err := tx.Bucket(besideBucket).Delete(besideKey(&rec)); err != nil {
			return err
		}
		return tx.Bucket(metaBucket).Put(schemaKey, []byte(schema))
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := s.Claim(ctx, req("D", s9, t0.Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if d.Claimed || d.Blocked == nil || d.Blocked.Key != "C" {
		t.Fatalf("after the upgrade, conversation 9's next write for a model: claimed %v, blocked by %+v; want held back by C's mark", d.Claimed, d.Blocked)
	}
}

// A file of schema 11 kept a marked record's Expires at its mark's end
// (storekit.UntilTold until its model is told), and telling shortened only
// the mark. Opened by this version, such a record, once told, must go when
// its mark and its lifetime have ended, as a record marked by this version
// goes — not be kept until 2262, swept by nothing: the upgrade gives it
// its tool's lifetime (here, X's hour). (Found reviewing d8e66dd.)
func TestUpgradeFromSchema11SweepsAToldMarkOnceItEnded(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s9 := agenttool.Digest{0x59, 9}
	s, path, req := closedMark(t, false)
	var err error
	// As version 11 left it: C's Expires moved to its mark's end.
	s = reopenAsSchema11Left(t, s, path, func(rec *storekit.Record) error {
		rec.Expires = rec.NoticeUntil
		return nil
	})
	defer s.Close()
	// Its model is told (held back by C, conversation 9's next write).
	d, err := s.Claim(ctx, req("D", s9, t0.Add(time.Minute)))
	if err != nil || d.Claimed || d.Blocked == nil || d.Blocked.Key != "C" {
		t.Fatalf("after the upgrade, conversation 9's next write: claimed %v, blocked by %+v, %v; want held back by C's mark", d.Claimed, d.Blocked, err)
	}
	rec, err := s.Get(ctx, "C")
	if err != nil || !rec.NoticeUntil.Before(t0.Add(2*time.Minute)) {
		t.Fatalf("C after telling: mark %v, %v; want told", rec.NoticeUntil, err)
	}
	// A day later its mark and its lifetime (an hour) have long ended.
	later := t0.Add(24 * time.Hour)
	if _, err := storekit.SweepAll(ctx, s, later, 0, nil); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, "C"); err == nil {
		t.Errorf("C a day after its told mark and its hour-long lifetime ended: kept (expires %v, mark %v, swept from %v); want swept", rec.Expires, rec.NoticeUntil, rec.SweepAt())
	}
}

// A file of schema 11 kept a marked record's Expires at its mark's end
// (storekit.UntilTold) and never moved it back: once its model was told
// and a later claim ended the mark, the record was settled, in no index,
// and lived in the generation of 2262. The upgrade to schema 12 must give
// it a lifetime as it gives one to a record that still keeps its mark
// (giveBackLifetimes), and as PostgreSQL's migration 14 does to every row
// kept until 2262 — not leave it, swept by nothing, until 2262. (Found
// reviewing 2e23fbe.)
func TestUpgradeFromSchema11SweepsAnEndedMarkKeptUntil2262(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s9 := agenttool.Digest{0x59, 9}
	s, path, req := closedMark(t, false)
	var err error
	// Conversation 9's next write is held back by C's mark and told.
	d, err := s.Claim(ctx, req("D", s9, t0.Add(time.Minute)))
	if err != nil || d.Claimed || d.Blocked == nil || d.Blocked.Key != "C" {
		t.Fatalf("conversation 9's next write: claimed %v, blocked by %+v, %v; want held back by C's mark", d.Claimed, d.Blocked, err)
	}
	// Its following write, after NoticeHold, ends C's mark and runs.
	e, err := s.Claim(ctx, req("E", s9, t0.Add(2*time.Minute)))
	if err != nil || !e.Claimed {
		t.Fatalf("conversation 9's write after the notice: claimed %v, blocked by %+v, %v", e.Claimed, e.Blocked, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: "E", Token: e.Record.Token, State: agenttool.Succeeded, Attempts: 1, Now: t0.Add(2 * time.Minute), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// As version 11 left C: its mark ended, its Expires still in 2262 (it
	// lives in that generation, as version 11 placed it).
	s = reopenAsSchema11Left(t, s, path, func(rec *storekit.Record) error {
		if !rec.NoticeUntil.IsZero() {
			return fmt.Errorf("C's mark after a claim past its notice: %v; want ended", rec.NoticeUntil)
		}
		rec.Expires = storekit.UntilTold
		return nil
	})
	defer s.Close()
	later := t0.Add(24 * time.Hour)
	if _, err := storekit.SweepAll(ctx, s, later, 0, nil); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, "C"); err == nil {
		t.Errorf("C a day after its mark ended and its tool's hour-long lifetime: kept (expires %v, mark %v, swept from %v); want swept, as migration 14 sweeps it in PostgreSQL", rec.Expires, rec.NoticeUntil, rec.SweepAt())
	}
}

// reopenAsSchema11Left changes C in s's file as fn says, as version 11
// would have left it, marks the file schema 11, and opens it again: the
// upgrade to this schema runs.
func reopenAsSchema11Left(t *testing.T, s *Store, path string, fn func(rec *storekit.Record) error) *Store {
	t.Helper()
	if err := s.DB().Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(recordsBucket)
		_, v := find(b, []byte("C"))
		rec, err := decode([]byte("C"), v)
		if err != nil {
			return err
		}
		old := rec
		if err := fn(&rec); err != nil {
			return err
		}
		if err := saveAt(b, &rec, &old, time.Time{}); err != nil {
			return err
		}
		return tx.Bucket(metaBucket).Put(schemaKey, []byte("11"))
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
