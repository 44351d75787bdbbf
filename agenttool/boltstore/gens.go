package boltstore

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Generations. A settled record that nothing but its lifetime keeps (see
// plain) lives in a generation: a bucket of the records whose lifetimes end
// within one window of time. When the window has passed, every record in it
// has expired, and a sweep deletes the generation whole — a bucket dropped
// from its parent, which writes no page of it — instead of deleting its
// records one by one, each from a leaf page of its own. So a busy store's
// commits write no more pages once records expire as fast as they are made
// than before any had expired (the soak benchmark: go run ./internal/bench
// -soak -boltstats).
//
// A window is a power of two seconds, the largest no longer than an eighth
// of the record's lifetime (its expiry less the time it was settled): a
// settled record stays in the file up to an eighth of its lifetime after it
// expires. A claim treats an expired record as absent, so this changes
// nothing but the file's size.
//
// A pending record lives in the pending bucket. Every other record —
// unknown, holding a fence slot or beside one, whose effect committed
// through Store.Effect, without a lifetime — lives in the records bucket,
// as do all records of files written before generations, and is swept one
// by one through the expiry index. A record is in exactly one place; a
// write that changes where it belongs moves it. A lookup tries the records
// bucket, the pending bucket, then each generation whose filter may hold
// the key (filter.go): with a sweeper, eight to seventeen per lifetime in
// use; without one, a write that starts a generation first drops those
// that have ended once maxGenerations are in the file.

// pendingBucket holds the pending records: the records every call claims
// and settles, apart from those that stay (unknown outcomes, notices), so
// that a claim and its outcome change a small tree whose pages a commit's
// calls share, however many records the file holds.
var pendingBucket = []byte("retrysafe/pending")

// gensBucket holds the generations (its sequence counts them), each a
// bucket named by genName, holding records (in its bucket genRecords, by
// key, whose sequence counts them). A generation's window is the only
// index of time its records need: a sweep drops or cuts a generation
// whole, never by expiry. Its bucket genExpiry is made empty and stays
// so. Earlier releases indexed each record there too, by expiryKey (a
// tree of its own: two more pages a settled call wrote, and a fifth of
// a lone call's CPU); a file they wrote keeps those entries until their
// generation goes, read by nothing. The bucket is still made so that an
// earlier release can open a file written now: it writes its entries
// there, which are as harmless.
var (
	gensBucket = []byte("retrysafe/gens")
	genRecords = []byte("records")
	genExpiry  = []byte("expiry")
)

// plain reports whether r may live in a generation: settled, with a
// lifetime, and in no index (its generation orders it by time). It does
// so unless an effect committed under its key (Store.Effect), whose entry
// a sweep deletes with the record: placeFor asks the effects bucket only
// then.
func plain(r *storekit.Record) bool {
	return (r.State == storekit.Succeeded || r.State == storekit.Failed) && !r.Expires.IsZero() &&
		!r.HoldsSlot() && !r.Beside() && !r.Open()
}

// genName names the generation of a record that expires at exp, settled at
// settled (zero if unknown: the window is then a second): the end of its
// window (Unix seconds, big-endian with the sign bit flipped, so that names
// sort by end), then the window's width as a power of two seconds.
func genName(exp, settled time.Time) []byte {
	exp = fromNanos(nanos(exp)) // as stored: within the range of Unix nanoseconds
	width := 0
	if life := exp.Sub(settled) / time.Second / 8; !settled.IsZero() && life > 1 {
		width = bits.Len64(uint64(life)) - 1
	}
	end := ((exp.Unix() >> width) + 1) << width
	name := binary.BigEndian.AppendUint64(make([]byte, 0, 9), uint64(end)^(1<<63))
	return append(name, byte(width))
}

// genEnd returns the end of a generation's window, Unix seconds.
func genEnd(name []byte) int64 {
	if len(name) != 9 {
		return 1<<63 - 1 // not a generation: never ends
	}
	return int64(binary.BigEndian.Uint64(name) ^ (1 << 63))
}

// place is where a record lives: the records bucket or the pending bucket
// (pending), with the expiry index, or the records of generation gen (no
// expiry index: nil).
type place struct {
	gen     []byte
	pending bool
	records *bolt.Bucket
	expiry  *bolt.Bucket
}

// find returns the place of key: the records bucket b, the pending bucket,
// a generation, or none (records nil) if the key has no record.
func find(b *bolt.Bucket, key []byte) (place, []byte) {
	return findWith(b, key, filtersOf(b.Tx()))
}

// findWith is find, skipping the generations whose filter in fs says the
// key is not there (nil: walking every generation).
func findWith(b *bolt.Bucket, key []byte, fs *filters) (place, []byte) {
	if v := b.Get(key); v != nil {
		return place{records: b, expiry: b.Tx().Bucket(expiryBucket)}, v
	}
	if pb := b.Tx().Bucket(pendingBucket); pb != nil {
		if v := pb.Get(key); v != nil {
			return place{pending: true, records: pb, expiry: b.Tx().Bucket(expiryBucket)}, v
		}
	}
	gens := b.Tx().Bucket(gensBucket)
	if gens == nil {
		return place{}, nil
	}
	var h uint64
	if fs != nil {
		h = fs.hash(key)
	}
	c := gens.Cursor()
	for name, v := c.First(); name != nil; name, v = c.Next() {
		if v != nil {
			continue
		}
		if fs != nil {
			if f := fs.usable(b.Tx(), name); f != nil && !f.mayHold(h) {
				continue
			}
		}
		g := gens.Bucket(name)
		r := g.Bucket(genRecords)
		if v := r.Get(key); v != nil {
			return place{gen: name, records: r}, v
		}
	}
	return place{}, nil
}

// maxGenerations is how many generations a write lets the file hold
// before it drops those that have ended itself, so that a lookup stays
// quick in a store no sweeper sweeps: with one, a store holds eight to
// seventeen per lifetime in use, and the sweeper drops them.
const maxGenerations = 64

// genFor returns the place of generation name, creating it if need be
// (and, if the file holds maxGenerations, first dropping those that ended
// by now: the time of the write, no later than the machine's clock; zero
// for an import, which drops none).
func genFor(tx *bolt.Tx, name []byte, now time.Time) (place, error) {
	gens := tx.Bucket(gensBucket)
	g := gens.Bucket(name)
	if g == nil {
		if gens.Sequence() >= maxGenerations {
			// At least one ended generation goes, whole whatever its
			// size (no slack): a cut would leave the count where it is,
			// and a file no sweeper sweeps would then gain a generation
			// with each window, its records never freed.
			if _, err := dropEnded(tx, now, genStep, math.MaxInt); err != nil {
				return place{}, err
			}
		}
		var err error
		if g, err = gens.CreateBucket(name); err != nil {
			return place{}, err
		}
		if err := gens.SetSequence(gens.Sequence() + 1); err != nil {
			return place{}, err
		}
		if _, err := g.CreateBucket(genRecords); err != nil {
			return place{}, err
		}
		if _, err := g.CreateBucket(genExpiry); err != nil {
			return place{}, err
		}
		if fs := filtersOf(tx); fs != nil {
			fs.made(tx, name)
		}
	}
	return place{gen: name, records: g.Bucket(genRecords)}, nil
}

// put writes r, whose encoded form is v, at p: counting it in a generation
// if it is new there.
func (p place) put(key, v []byte) error {
	if p.gen != nil && p.records.Get(key) == nil {
		if err := p.records.SetSequence(p.records.Sequence() + 1); err != nil {
			return err
		}
		if fs := filtersOf(p.records.Tx()); fs != nil {
			fs.added(p.gen, key)
		}
	}
	return p.records.Put(key, v)
}

// del deletes key's record at p, with the expiry entry at (0: none).
func (p place) del(key []byte, at int64) error {
	if p.gen != nil && p.records.Get(key) != nil {
		if err := p.records.SetSequence(p.records.Sequence() - 1); err != nil {
			return err
		}
	}
	if err := p.records.Delete(key); err != nil {
		return err
	}
	if at != 0 && p.expiry != nil {
		return p.expiry.Delete(expiryKey(at, string(key)))
	}
	return nil
}

// same reports whether two places are one.
func (p place) same(q place) bool {
	return p.pending == q.pending && (p.gen == nil) == (q.gen == nil) && bytes.Equal(p.gen, q.gen)
}

// dropEnded deletes the records of generations whose windows ended by
// now, oldest first, and returns how many it deleted: up to budget of
// them (or one generation of up to slack records), each generation whole
// while what is left of it fits in what is left of the budget, and the
// last one cut down from its start.
//
// Dropping a generation whole deletes a bucket: bbolt writes none of its
// pages but frees every one of them in the commit, at about 110 ns a
// record, and every call waits behind that commit. A busy store's window
// holds a hundred thousand records or more (6 ms to free on a quiet
// machine, 30 ms seen on a busy one); so a generation bigger than slack
// is deleted over several steps instead: each cuts budget records from
// the start of its tree (about 1 µs a record: each a seek, a cut in key
// order that frees the pages it empties and writes only the few at its
// edge), and as many of an earlier release's expiry entries, until the
// rest fits. Every record in a generation that ended has expired, so
// which go first does not matter, and what is left of one meanwhile is
// found as before, expired.
func dropEnded(tx *bolt.Tx, now time.Time, budget, slack int) (int, error) {
	gens := tx.Bucket(gensBucket)
	if gens == nil {
		return 0, nil
	}
	var ended [][]byte
	c := gens.Cursor()
	for name, v := c.First(); name != nil && genEnd(name) <= now.Unix(); name, v = c.Next() {
		if v == nil {
			ended = append(ended, bytes.Clone(name))
		}
	}
	if fs := filtersOf(tx); fs != nil {
		fs.ended(tx, now.Unix())
	}
	n := 0
	for _, name := range ended {
		if budget <= 0 {
			break
		}
		g := gens.Bucket(name)
		records := g.Bucket(genRecords)
		left := int(records.Sequence())
		if left > budget && left > slack {
			cut, err := cutGen(records, g.Bucket(genExpiry), budget)
			n += cut
			return n, err
		}
		n += left
		budget -= left
		if err := dropGen(gens, name); err != nil {
			return n, err
		}
	}
	return n, nil
}

// genStep is the most records a sweep step of the store's own size
// cuts from a generation that ended, and genWhole the most a generation
// may hold to be dropped whole by such a step: each costs about a
// millisecond (BenchmarkSweepOfAnEndedGeneration).
const (
	genStep  = 1024
	genWhole = 8192
)

// cutGen deletes most records from the start of a generation's records,
// and as many entries from the start of its expiry index (which only an
// earlier release wrote), and returns how many records it deleted.
func cutGen(records, expiry *bolt.Bucket, most int) (int, error) {
	cut := func(b *bolt.Bucket) (int, error) {
		// The keys first, then each deleted by a seek: a cursor that
		// deletes as it goes walks the leaves it emptied again.
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.First(); k != nil && len(keys) < most; k, _ = c.Next() {
			keys = append(keys, k)
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}
	n, err := cut(records)
	if err != nil {
		return 0, err
	}
	if err := records.SetSequence(records.Sequence() - uint64(n)); err != nil {
		return 0, err
	}
	_, err = cut(expiry)
	return n, err
}

// dropGen deletes generation name, whole, from gens, and counts it gone.
func dropGen(gens *bolt.Bucket, name []byte) error {
	if err := gens.DeleteBucket(name); err != nil {
		return err
	}
	if fs := filtersOf(gens.Tx()); fs != nil {
		fs.dropped(gens.Tx(), name)
	}
	return gens.SetSequence(max(gens.Sequence(), 1) - 1)
}

// forEachGen calls fn with the place of every generation, in order of end.
func forEachGen(tx *bolt.Tx, fn func(p place) error) error {
	gens := tx.Bucket(gensBucket)
	if gens == nil {
		return nil
	}
	c := gens.Cursor()
	for name, v := c.First(); name != nil; name, v = c.Next() {
		if v != nil {
			continue
		}
		g := gens.Bucket(name)
		if err := fn(place{gen: name, records: g.Bucket(genRecords)}); err != nil {
			return err
		}
	}
	return nil
}

// unplain moves out of the generations the records an earlier version
// put there that this one does not (plain): records closed as replaced
// that keep a mark, which version 11 indexes beside their slot. A record
// a generation holds that cannot be read stays where it is.
func unplain(tx *bolt.Tx) error {
	var move []storekit.Record
	err := forEachGen(tx, func(p place) error {
		return p.records.ForEach(func(k, v []byte) error {
			rec, err := decode(k, v)
			if err == nil && !plain(&rec) {
				move = append(move, rec)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	b := tx.Bucket(recordsBucket)
	for i := range move {
		if err := saveAt(b, &move[i], &move[i], time.Time{}); err != nil {
			return err
		}
	}
	return nil
}
