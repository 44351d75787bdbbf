package boltstore

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// Filters. A claim of a new key learns that no generation holds it by
// looking in each: with a sweeper, eight to seventeen trees of tens of
// thousands of records, and the writer does so for each call of a commit.
// So each generation has a filter in memory, a Bloom filter of the keys it
// holds: it answers "not here" for about 99 in 100 keys the generation does
// not hold, at the cost of one cache line, and "maybe" for every key it
// does. A lookup walks the tree of a generation only on "maybe".
//
// A filter is derived data, as bbolt's freelist is (see boltOptions): Open
// builds it from the keys in the file, and every write that puts a key in a
// generation adds it, inside its transaction, before that transaction
// commits. Nothing is ever taken out: a key deleted from a generation, or
// put by a transaction that rolled back, stays in its filter, which then
// costs a lookup and never changes an answer. So a filter holds every key
// of its generation, and a lookup that skips a generation skips one that
// does not hold the key — the promise rests on this, and the rules that
// keep it are:
//
//   - Every put of a key into a generation's records adds it to the
//     generation's filter (place.put): there is no other way into a
//     generation, for a claim's settling write, a move or an import alike.
//   - A write that makes a generation gives it a new, empty filter (the
//     generation is empty); one that drops a generation forgets the filter
//     it had once the write has committed (and a sweep, the filters of
//     every generation that ended, of which a write that rolled back may
//     have left some), but not one made since.
//   - A lookup uses a filter only once the write that made it has
//     committed: a write that drops a generation and makes it again (a
//     sweep and a settling write whose clocks disagree, in one batch),
//     then rolls back, leaves the old generation in the file, and its
//     filter replaced by one that knows none of its keys. bbolt gives a
//     rolled-back write's id to the next, so the id alone cannot tell.
//   - A lookup uses a filter only if it was made no later than the
//     transaction it runs in (by transaction id): a reader whose snapshot
//     still holds a generation dropped and made again since — the same
//     window, after the clock went back — walks its tree.
//   - A generation without a filter is walked.
//
// The filters take 1.3 to 1.9 bytes a record in generations, in the heap
// of the process that has the file open (bbolt lets one process write it);
// building them at Open reads every key in the generations once.

// filterBits is the bits a filter spends on each key it is sized for. Six
// of them are set a key, all in one 512-bit block: about one key in a
// hundred that the generation does not hold is answered "maybe"
// (TestAGenerationFilterSaysMaybeForEveryKeyItHoldsAndFewItLacks measures
// it).
const (
	filterBits  = 10
	filterK     = 6
	filterMin   = 1024 // keys a new generation's filter is sized for at least
	filterBlock = 8    // 64-bit words in a block: one cache line
)

// openFilters holds the filters of each open store's file, by its bbolt
// database: the package's functions reach them from the transaction they
// are given. Close forgets them.
var openFilters sync.Map // *bolt.DB → *filters

// filters are the filters of one file's generations.
type filters struct {
	seed maphash.Seed
	mu   sync.Mutex                            // serializes changes of gens
	gens atomic.Pointer[map[string]*genFilter] // replaced whole, never changed
}

// genFilter is the filter of one generation. Only the writer changes it
// (bbolt runs one write transaction at a time); lookups read it at once.
type genFilter struct {
	made      int         // the transaction that made the generation, or read it at Open
	committed atomic.Bool // that transaction committed (or it read at Open)
	parts     atomic.Pointer[[]*bloom]
}

// bloom is one blocked Bloom filter, sized for room keys. A generation's
// filter adds a bloom twice the size of the last when the last is full.
type bloom struct {
	words  []atomic.Uint64
	blocks uint64
	keys   int // the writer's alone
	room   int
}

// filtersOf returns the filters of the file tx reads, or nil if it has
// none (a lookup then walks every generation).
func filtersOf(tx *bolt.Tx) *filters {
	if fs, ok := openFilters.Load(tx.DB()); ok {
		return fs.(*filters)
	}
	return nil
}

// buildFilters reads every generation's keys in db and registers their
// filters. It runs in Open, before the store writes or serves.
func buildFilters(db *bolt.DB) error {
	fs := &filters{seed: maphash.MakeSeed()}
	m := map[string]*genFilter{}
	err := db.View(func(tx *bolt.Tx) error {
		return forEachGen(tx, func(p place) error {
			f := newGenFilter(tx.ID(), int(p.records.Sequence()))
			f.committed.Store(true)
			c := p.records.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				f.add(fs.hash(k))
			}
			m[string(p.gen)] = f
			return nil
		})
	})
	if err != nil {
		return err
	}
	fs.gens.Store(&m)
	openFilters.Store(db, fs)
	return nil
}

// forgetFilters drops the filters of db, when its store closes.
func forgetFilters(db *bolt.DB) { openFilters.Delete(db) }

func (fs *filters) hash(key []byte) uint64 { return maphash.Bytes(fs.seed, key) }

// usable returns the filter of generation name if tx may trust it, nil if
// tx must walk the generation.
func (fs *filters) usable(tx *bolt.Tx, name []byte) *genFilter {
	if f := (*fs.gens.Load())[string(name)]; f != nil && f.committed.Load() && f.made <= tx.ID() {
		return f
	}
	return nil
}

// made gives generation name, which tx makes, a new filter, sized as the
// fullest of those of generations as wide (windows of one width hold the
// records of about one lifetime, as many as the load makes in a window),
// that lookups use once tx has committed.
func (fs *filters) made(tx *bolt.Tx, name []byte) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	old := *fs.gens.Load()
	room := 0
	for k, f := range old {
		if sameWidth(k, name) {
			room = max(room, f.keys())
		}
	}
	m := make(map[string]*genFilter, len(old)+1)
	for k, f := range old {
		m[k] = f
	}
	f := newGenFilter(tx.ID(), room)
	m[string(name)] = f
	fs.gens.Store(&m)
	tx.OnCommit(func() { f.committed.Store(true) })
}

// sameWidth reports whether two generations' windows are as wide.
func sameWidth(a string, b []byte) bool {
	return len(a) == len(b) && len(b) > 0 && a[len(a)-1] == b[len(b)-1]
}

// dropped forgets the filter of generation name once tx, which drops it,
// has committed, unless a write has made the generation again since.
func (fs *filters) dropped(tx *bolt.Tx, name []byte) {
	if f := (*fs.gens.Load())[string(name)]; f != nil {
		gone := map[string]*genFilter{string(name): f}
		tx.OnCommit(func() { fs.forget(gone) })
	}
}

// ended forgets, once tx has committed, the filters of the generations
// whose window ended by end (Unix seconds), which tx drops: with them go
// those of generations made by writes that rolled back. A filter made
// since (later in tx, or by a later write) stays.
func (fs *filters) ended(tx *bolt.Tx, end int64) {
	gone := map[string]*genFilter{}
	for k, f := range *fs.gens.Load() {
		if genEnd([]byte(k)) <= end {
			gone[k] = f
		}
	}
	if len(gone) > 0 {
		tx.OnCommit(func() { fs.forget(gone) })
	}
}

// forget drops each filter of gone that is still its generation's.
func (fs *filters) forget(gone map[string]*genFilter) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	old := *fs.gens.Load()
	m := make(map[string]*genFilter, len(old))
	for k, f := range old {
		if gone[k] != f {
			m[k] = f
		}
	}
	fs.gens.Store(&m)
}

// added adds key, which the writer puts in generation name, to its filter.
func (fs *filters) added(name, key []byte) {
	if f := (*fs.gens.Load())[string(name)]; f != nil {
		f.add(fs.hash(key))
	}
}

func newGenFilter(made, room int) *genFilter {
	f := &genFilter{made: made}
	parts := []*bloom{newBloom(max(room, filterMin))}
	f.parts.Store(&parts)
	return f
}

func (f *genFilter) add(h uint64) {
	parts := *f.parts.Load()
	last := parts[len(parts)-1]
	if last.keys >= last.room {
		last = newBloom(2 * last.room)
		grown := append(parts[:len(parts):len(parts)], last)
		f.parts.Store(&grown)
	}
	last.add(h)
	last.keys++
}

// keys returns how many keys were added to f: the writer's to call.
func (f *genFilter) keys() int {
	n := 0
	for _, b := range *f.parts.Load() {
		n += b.keys
	}
	return n
}

// mayHold reports false if the generation does not hold the key of hash h.
func (f *genFilter) mayHold(h uint64) bool {
	for _, b := range *f.parts.Load() {
		if b.mayHold(h) {
			return true
		}
	}
	return false
}

func newBloom(room int) *bloom {
	blocks := (room*filterBits + filterBlock*64 - 1) / (filterBlock * 64)
	return &bloom{words: make([]atomic.Uint64, blocks*filterBlock), blocks: uint64(blocks), room: room}
}

// block returns the words of h's block; bits, the filterK bits h sets in
// it, each 9 bits of a second hash derived from h.
func (b *bloom) block(h uint64) []atomic.Uint64 {
	i := (h & (1<<32 - 1)) * b.blocks >> 32
	return b.words[i*filterBlock : (i+1)*filterBlock]
}

func spread(h uint64) uint64 {
	// splitmix64's finalizer: every bit of h moves about half of the result.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

func (b *bloom) add(h uint64) {
	w := b.block(h)
	for i, s := 0, spread(h); i < filterK; i, s = i+1, s>>9 {
		w[s>>6&7].Or(1 << (s & 63))
	}
}

func (b *bloom) mayHold(h uint64) bool {
	w := b.block(h)
	for i, s := 0, spread(h); i < filterK; i, s = i+1, s>>9 {
		if w[s>>6&7].Load()&(1<<(s&63)) == 0 {
			return false
		}
	}
	return true
}
