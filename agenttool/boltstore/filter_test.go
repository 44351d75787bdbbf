package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// A generation's filter answers "maybe" for every key it was given, grown
// past its size or not, and "not here" for nearly every other key.
func TestAGenerationFilterSaysMaybeForEveryKeyItHoldsAndFewItLacks(t *testing.T) {
	fs := &filters{seed: maphash.MakeSeed()}
	const n = 200_000
	for _, c := range []struct {
		name   string
		room   int
		parts  int
		maxFPR float64
	}{
		{"sized for its keys", n, 1, 0.02},
		{"grown from the least size", 0, 8, 0.10},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newGenFilter(0, c.room)
			for i := range n {
				f.add(fs.hash(fmt.Appendf(nil, "send_email/%d", i)))
			}
			if got := len(*f.parts.Load()); got != c.parts {
				t.Errorf("%d parts, want %d", got, c.parts)
			}
			for i := range n {
				if !f.mayHold(fs.hash(fmt.Appendf(nil, "send_email/%d", i))) {
					t.Fatalf("key %d was added and the filter says it is not there", i)
				}
			}
			maybe := 0
			for i := range n {
				if f.mayHold(fs.hash(fmt.Appendf(nil, "book_seat/%d", i))) {
					maybe++
				}
			}
			rate := float64(maybe) / n
			t.Logf("%d keys it lacks answered maybe: %.2f%%", maybe, 100*rate)
			if rate > c.maxFPR {
				t.Errorf("%.2f%% of the keys it lacks answered maybe, want at most %.0f%%", 100*rate, 100*c.maxFPR)
			}
		})
	}
}

// A new generation's filter is sized for as many keys as the fullest
// generation of its width holds — records of about the same lifetime —
// not for those of a busier lifetime's windows, nor for no more than the
// least when one of its width holds many.
func TestANewGenerationsFilterIsSizedAsTheFullestOfItsWidth(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	var recs []storekit.Record
	for i := range 5000 {
		// Lifetimes of 80 s: windows of 8 s, all in one.
		recs = append(recs, succeeded(fmt.Sprintf("k/%d", i), t0, 80*time.Second))
	}
	if err := s.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	settle(t, s, "t", "long", t0, time.Hour)                        // windows of 256 s
	settle(t, s, "t", "short", t0.Add(time.Minute), 80*time.Second) // a later window of 8 s
	rooms := map[string]int{}
	s.db.View(func(tx *bolt.Tx) error {
		for name, f := range *filtersOf(tx).gens.Load() {
			rooms[fmt.Sprintf("%x", name)] = (*f.parts.Load())[0].room
		}
		return nil
	})
	at := places(t, s, "k/0", "long", "short")
	if got := rooms[at[1]]; got != filterMin {
		t.Errorf("the first generation of windows of 256 s has a filter sized for %d keys, want %d", got, filterMin)
	}
	if got := rooms[at[2]]; got < 5000 {
		t.Errorf("a generation of windows of 8 s, beside one of 5,000 records, has a filter sized for %d keys", got)
	}
}

// lookupsAgree fails the test if a lookup that uses the filters finds any
// of keys elsewhere than one that walks every generation, in tx.
func lookupsAgree(t *testing.T, tx *bolt.Tx, keys []string, when string) {
	t.Helper()
	fs := filtersOf(tx)
	if fs == nil {
		t.Fatalf("%s: the store has no filters", when)
	}
	b := tx.Bucket(recordsBucket)
	for _, k := range keys {
		p, v := findWith(b, []byte(k), fs)
		want, wantV := findWith(b, []byte(k), nil)
		if !bytes.Equal(v, wantV) || !p.same(want) {
			t.Fatalf("%s: %s found in generation %x (%d bytes) with the filters, in %x (%d bytes) walking every generation",
				when, k, p.gen, len(v), want.gen, len(wantV))
		}
	}
}

// The promise rests on this: a lookup that skips a generation on its
// filter's word skips one that does not hold the key, whatever wrote the
// generation — settling writes, moves out of and into generations, imports,
// writes rolled back (some of which dropped generations and made them
// again), sweeps that drop generations, a clock that goes back and makes a
// dropped generation again, a reopened file.
func TestALookupSkipsNoGenerationThatHoldsTheKey(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	rng := rand.New(rand.NewPCG(7, 24))
	t0 := time.Unix(1_780_000_000, 0)
	now := t0
	var keys []string
	settled := map[string]uint64{} // key → token, for the keys now pending
	lifetimes := []time.Duration{8 * time.Second, 80 * time.Second, 10 * time.Minute}
	for step := range 1500 {
		now = now.Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
		switch op := rng.IntN(100); {
		case op < 50: // a new action, settled at once
			var key string
			keys, key = newKey(keys)
			settle(t, s, "t", key, now, lifetimes[rng.IntN(len(lifetimes))])
		case op < 60: // a new action left pending, or unknown then settled (moves)
			var key string
			keys, key = newKey(keys)
			settled[key] = claimNew(t, s, key, now)
		case op < 70: // a pending action settles: it moves into a generation
			for key, token := range settled {
				state := agenttool.Succeeded
				if rng.IntN(2) == 0 {
					state = agenttool.Failed
				}
				if err := s.Finish(ctx, storekit.FinishRequest{Key: key, Token: token, State: state, Attempts: 1,
					Outcome: []byte(`{}`), Now: now, TTL: lifetimes[rng.IntN(len(lifetimes))]}); err != nil {
					t.Fatal(err)
				}
				delete(settled, key)
				break
			}
		case op < 75: // the clock goes back by up to two minutes
			now = now.Add(-time.Duration(rng.IntN(120)) * time.Second)
		case op < 82: // a sweep drops the generations that ended, or deletes a step of records
			limit := []int{0, 0, 1, 50}[rng.IntN(4)]
			if _, err := s.Sweep(ctx, storekit.SweepRequest{Now: now.Add(time.Duration(rng.IntN(200)) * time.Second), Limit: limit}); err != nil {
				t.Fatal(err)
			}
		case op < 87: // an import into generations, some of them new
			keys = importSome(t, s, rng, now, lifetimes, keys)
		case op < 95: // a write that puts keys in generations, then rolls back
			var rolled []string
			err := s.db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(recordsBucket)
				if rng.IntN(2) == 0 {
					// First it drops the generations that end within
					// minutes (a sweep whose clock runs ahead, in the
					// batch), which the keys below may make again.
					if _, err := dropEnded(tx, now.Add(time.Duration(rng.IntN(600))*time.Second), genStep, genWhole); err != nil {
						return err
					}
				}
				for range 1 + rng.IntN(5) {
					key := fmt.Sprintf("rolled/%d/%d", step, len(rolled))
					rolled = append(rolled, key)
					exp := now.Add(lifetimes[rng.IntN(len(lifetimes))] + time.Duration(rng.IntN(600)-300)*time.Second)
					r := succeeded(key, now, exp.Sub(now))
					if err := saveAt(b, &r, nil, time.Time{}); err != nil {
						return err
					}
				}
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				t.Fatal(err)
			}
			keys = append(keys, rolled...)
		default: // the process restarts
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(path, nil); err != nil {
				t.Fatal(err)
			}
		}
		if step%50 == 0 || step == 1499 {
			s.db.View(func(tx *bolt.Tx) error {
				lookupsAgree(t, tx, keys, fmt.Sprintf("step %d", step))
				return nil
			})
		}
	}
	names, held := gensLeft(s)
	if len(names) < 8 || held < 300 {
		t.Errorf("the run left %d generations holding %d records: too few to tell", len(names), held)
	}

	// Once every generation has ended and gone, no filter is left in
	// memory, not even those of generations made by writes rolled back.
	if _, err := s.Sweep(ctx, storekit.SweepRequest{Now: now.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if names, _ := gensLeft(s); len(names) != 0 {
		t.Fatalf("generations %v outlived the sweep", names)
	}
	s.db.View(func(tx *bolt.Tx) error {
		if left := *filtersOf(tx).gens.Load(); len(left) != 0 {
			t.Errorf("%d filters outlived their generations", len(left))
		}
		return nil
	})
}

// newKey returns keys with the property tests' next key added, and that key.
func newKey(keys []string) ([]string, string) {
	key := fmt.Sprintf("k/%d", len(keys))
	return append(keys, key), key
}

// claimNew claims key, new, and returns its token: the action runs.
func claimNew(t *testing.T, s *Store, key string, now time.Time) uint64 {
	t.Helper()
	res, err := s.Claim(context.Background(), storekit.ClaimRequest{Key: key, Tool: "t", Owner: "o", Now: now, Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("claim %s: %+v %v", key, res, err)
	}
	return res.Record.Token
}

// importSome imports 1 to 20 new records, settled up to a minute before now
// with one of lifetimes, and returns keys with theirs.
func importSome(t *testing.T, s *Store, rng *rand.Rand, now time.Time, lifetimes []time.Duration, keys []string) []string {
	t.Helper()
	var recs []storekit.Record
	for range 1 + rng.IntN(20) {
		var key string
		keys, key = newKey(keys)
		at := now.Add(-time.Duration(rng.IntN(60)) * time.Second)
		recs = append(recs, succeeded(key, at, lifetimes[rng.IntN(len(lifetimes))]))
	}
	if err := s.Import(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	return keys
}

// A reader whose snapshot was taken before a generation was dropped, and
// made again by a write whose clock went back, still finds the records the
// old generation held: the new generation's filter knows only its own.
func TestAReaderOfAnOlderSnapshotFindsWhatItsGenerationHeld(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	const ttl = 80 * time.Second // windows of 8 s
	// Free pages first, which the writes below take: bbolt cannot grow
	// its map of the file while a reader holds it.
	var filler []storekit.Record
	for i := range 2000 {
		at := t0.Add(-time.Hour)
		filler = append(filler, succeeded(fmt.Sprintf("filler/%d", i), at, ttl))
	}
	if err := s.Import(ctx, filler); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sweep(ctx, storekit.SweepRequest{Now: t0}); err != nil {
		t.Fatal(err)
	}
	settle(t, s, "t", "old", t0, ttl)
	gen := places(t, s, "old")[0]

	reader, err := s.db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback()

	if _, err := s.Sweep(ctx, storekit.SweepRequest{Now: t0.Add(ttl + time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if names, _ := gensLeft(s); len(names) != 0 {
		t.Fatalf("the sweep left generations %v", names)
	}
	settle(t, s, "t", "new", t0, ttl) // the clock went back: the same window again
	if got := places(t, s, "new")[0]; got != gen {
		t.Fatalf("the new record went to %s, not to the dropped generation %s again", got, gen)
	}

	if _, v := find(reader.Bucket(recordsBucket), []byte("old")); v == nil {
		t.Fatal("a reader of the snapshot before the drop lost a record its generation held")
	}
	lookupsAgree(t, reader, []string{"old", "new"}, "the older snapshot")
}

// Lookups read the filters while the writer adds to them, makes and drops
// generations: every record settled before a lookup began is found (run
// with -race).
func TestLookupsFindWhatSettledWhileTheWriterChangesTheFilters(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	const ttl = 16 * time.Second // windows of 2 s
	var mu sync.Mutex
	var done []string
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for r := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				n := len(done)
				var key string
				if n > 0 {
					key = done[n-1-rng.IntN(min(n, 50))]
				}
				mu.Unlock()
				if key == "" {
					continue
				}
				if _, err := s.Get(ctx, key); err != nil {
					errs <- fmt.Errorf("%s, settled before the lookup began: %w", key, err)
					return
				}
			}
		})
	}
	for i := range 3000 {
		now := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		key := fmt.Sprintf("k/%d", i)
		settle(t, s, "t", key, now, ttl)
		mu.Lock()
		done = append(done, key)
		mu.Unlock()
		if i%200 == 199 {
			// Drops the generations that ended more than a lifetime ago:
			// never those of the last 50 keys, which readers look up.
			if _, err := s.Sweep(ctx, storekit.SweepRequest{Now: now.Add(-ttl)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Open builds the generations' filters by reading every key the
// generations hold: what that adds to Open, against the file's records.
func BenchmarkOpenBuildsTheFilters(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		path := filepath.Join(b.TempDir(), "keys.db")
		s, err := Open(path, nil)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Unix(1_780_000_000, 0)
		const batch = 5_000
		for i := 0; i < n; i += batch {
			var recs []storekit.Record
			for j := i; j < i+batch; j++ {
				// 16 generations of windows of 8 s, as the soak's.
				at := t0.Add(time.Duration(j%16) * 8 * time.Second)
				recs = append(recs, storekit.Record{Key: fmt.Sprintf("send_email/%032x", j), Tool: "send_email", State: agenttool.Succeeded,
					Token: 1, Attempts: 1, Outcome: []byte(`{"id":"m-1"}`), Created: at, Updated: at, Expires: at.Add(80 * time.Second)})
			}
			if err := s.Import(context.Background(), recs); err != nil {
				b.Fatal(err)
			}
		}
		s.Close()
		b.Run(fmt.Sprintf("records=%d/open", n), func(b *testing.B) {
			for b.Loop() {
				s, err := Open(path, nil)
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/open")
		})
		b.Run(fmt.Sprintf("records=%d/filters", n), func(b *testing.B) {
			s, err := Open(path, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for b.Loop() {
				if err := buildFilters(s.db); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/build")
		})
	}
}

// writeQueue lines up writes behind a held commit, so that they share one
// batch of the group commit, in the order queued.
type writeQueue struct {
	t  *testing.T
	s  *Store
	wg sync.WaitGroup
}

// holder is a write that holds the writer, inside its transaction, from
// when it runs (running is closed) until release.
type holder struct {
	running, released chan struct{}
}

func (q *writeQueue) holder() *holder {
	return &holder{make(chan struct{}), make(chan struct{})}
}

func (h *holder) write(*bolt.Tx) error {
	close(h.running)
	<-h.released
	return nil
}

func (h *holder) release() { close(h.released) }

// queue runs call, which writes once, and returns once its write is queued
// behind the held commit.
func (q *writeQueue) queue(call func()) {
	q.t.Helper()
	q.s.writes.mu.Lock()
	before := len(q.s.writes.queue)
	q.s.writes.mu.Unlock()
	q.wg.Go(call)
	for deadline := time.Now().Add(10 * time.Second); ; {
		q.s.writes.mu.Lock()
		queued := len(q.s.writes.queue)
		q.s.writes.mu.Unlock()
		if queued > before {
			return
		}
		if time.Now().After(deadline) {
			q.t.Fatal("a write did not queue behind the held commit")
		}
		time.Sleep(time.Millisecond)
	}
}

// A batch that drops a generation (a sweep whose clock runs ahead) and
// makes it again (a settling write whose clock is behind), then rolls back
// because a later write of the batch failed, leaves the generation in the
// file as it was: a claim of a settled action in it, run again alone,
// replays the action and never claims it anew — which would run the tool
// a second time.
func TestAClaimRunAgainAfterABatchRolledBackReplaysWhatItsGenerationHolds(t *testing.T) {
	ctx := context.Background()
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	const ttl = time.Hour
	settledAt := t0.Add(30 * time.Second)
	const n = 5
	tokens := map[string]uint64{}
	for _, key := range []string{"a/0", "a/1", "a/2", "a/3", "a/4", "later"} {
		res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "t", Owner: "A", Now: t0, Lease: time.Minute})
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v %v", key, res, err)
		}
		tokens[key] = res.Record.Token
	}
	finish := func(key string) error {
		return s.Finish(ctx, storekit.FinishRequest{Key: key, Token: tokens[key], State: agenttool.Succeeded, Attempts: 1,
			Outcome: []byte(`{}`), Now: settledAt, TTL: ttl})
	}

	q := &writeQueue{t: t, s: s}
	first := q.holder()
	q.wg.Go(func() { s.writes.update(ctx, first.write) })
	<-first.running
	// The holder settles a/0…a/4 late, after their leases ended, in a
	// batch held open while other callers, who found the leases ended,
	// queue claims that must write.
	finished := make([]error, n)
	for i := range n {
		q.queue(func() { finished[i] = finish(fmt.Sprintf("a/%d", i)) })
	}
	settling := q.holder()
	q.queue(func() { s.writes.update(ctx, settling.write) })
	first.release()
	<-settling.running

	claims := make([]storekit.ClaimResult, n)
	claimErrs := make([]error, n)
	for i := range n {
		q.queue(func() {
			claims[i], claimErrs[i] = s.Claim(ctx, storekit.ClaimRequest{Key: fmt.Sprintf("a/%d", i), Tool: "t", Owner: "B",
				Now: t0.Add(2 * time.Minute), Lease: time.Minute})
		})
	}
	// In the same batch: a sweep whose clock runs hours ahead drops the
	// generation of a/0…a/4; a settling write whose clock is behind makes
	// it again; a write fails, and the batch rolls back.
	var swept, settled, failed error
	q.queue(func() { _, swept = s.Sweep(ctx, storekit.SweepRequest{Now: t0.Add(3 * time.Hour)}) })
	q.queue(func() { settled = finish("later") })
	errBoom := errors.New("boom")
	q.queue(func() { failed = s.writes.update(ctx, func(*bolt.Tx) error { return errBoom }) })
	settling.release()
	q.wg.Wait()

	for i, err := range finished {
		if err != nil {
			t.Fatalf("settling a/%d: %v", i, err)
		}
	}
	if swept != nil || settled != nil || !errors.Is(failed, errBoom) {
		t.Fatalf("sweep: %v; settling later: %v; the failing write: %v", swept, settled, failed)
	}
	for i := range n {
		if claimErrs[i] != nil {
			t.Fatalf("claim of a/%d: %v", i, claimErrs[i])
		}
		if c := claims[i]; c.Claimed || c.Record.State != agenttool.Succeeded {
			t.Errorf("a/%d, settled before its claim ran: claimed %v, state %v; want its success replayed, not a second run",
				i, c.Claimed, c.Record.State)
		}
	}
}

// A write that drops a generation and makes it again (a sweep ahead of a
// settling write's clock, in one batch) leaves the new generation its
// filter: its lookups skip it as they skip the others.
func TestAGenerationMadeAgainByTheWriteThatDroppedItKeepsItsFilter(t *testing.T) {
	s := OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	const ttl = 80 * time.Second // windows of 8 s
	settle(t, s, "t", "old", t0, ttl)
	gen := mustHex(t, places(t, s, "old")[0])
	err := s.db.Update(func(tx *bolt.Tx) error {
		if n, err := dropEnded(tx, t0.Add(ttl+time.Minute), genStep, genWhole); err != nil || n != 1 {
			return fmt.Errorf("dropped %d records: %v", n, err)
		}
		r := succeeded("new", t0, ttl)
		r.Token = 2
		return saveAt(tx.Bucket(recordsBucket), &r, nil, time.Time{})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := places(t, s, "old", "new"); got[0] != "" || got[1] != fmt.Sprintf("%x", gen) {
		t.Fatalf("old in %q, new in %q: want old gone, new in %x again", got[0], got[1], gen)
	}
	s.db.View(func(tx *bolt.Tx) error {
		f := filtersOf(tx).usable(tx, gen)
		switch {
		case f == nil:
			t.Error("the generation made again has no filter a lookup may use: every lookup walks it")
		case !f.mayHold(filtersOf(tx).hash([]byte("new"))):
			t.Error("the generation's filter lacks the key it holds")
		}
		return nil
	})
}

// openCapped opens the store at path with a file that may not grow past
// maxSize bytes (bbolt's MaxSize), mapped whole from the start: a commit
// that needs more fails, after the write's functions ran, and a reader held
// open never stops a write remapping the file.
func openCapped(t *testing.T, path string, maxSize int) *Store {
	t.Helper()
	o := boltOptions(Options{LockTimeout: time.Second})
	o.MaxSize = maxSize
	o.InitialMmapSize = maxSize
	db, err := bolt.Open(path, 0o600, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(initSchema); err != nil {
		t.Fatal(err)
	}
	if err := buildFilters(db); err != nil {
		t.Fatal(err)
	}
	return &Store{db: db, path: path, writes: groupCommit{db: db}}
}

// A write that drops a generation and makes it again, then fails to
// commit (the file may not grow), leaves the generation in the file as it
// was, beside a filter that knows none of its keys. bbolt runs no commit
// handler of a commit that failed, and gives its id to the next write,
// which commits: a claim of a settled action in the generation still
// replays it, and never claims it anew.
func TestAClaimAfterACommitThatFailedReplaysWhatItsGenerationHolds(t *testing.T) {
	ctx := context.Background()
	s := openCapped(t, filepath.Join(t.TempDir(), "capped.db"), 1<<20)
	defer s.Close()
	t0 := time.Unix(1_780_000_000, 0)
	const ttl = 80 * time.Second // windows of 8 s
	settle(t, s, "t", "old", t0, ttl)
	gen := places(t, s, "old")[0]

	failedID := -1
	err := s.db.Update(func(tx *bolt.Tx) error {
		failedID = tx.ID()
		if n, err := dropEnded(tx, t0.Add(ttl+time.Minute), genStep, genWhole); err != nil || n != 1 {
			return fmt.Errorf("dropped %d records: %v", n, err)
		}
		r := succeeded("new", t0, ttl)
		r.Token = 2
		if err := saveAt(tx.Bucket(recordsBucket), &r, nil, time.Time{}); err != nil {
			return err
		}
		// More than the file may hold: the commit fails.
		scratch, err := tx.CreateBucket([]byte("scratch"))
		if err != nil {
			return err
		}
		return scratch.Put([]byte("big"), make([]byte, 2<<20))
	})
	if !errors.Is(err, berrors.ErrMaxSizeReached) {
		t.Fatalf("the write that made the generation again committed with %v; want its commit to fail for want of room", err)
	}
	if got := places(t, s, "old", "new"); got[0] != gen || got[1] != "" {
		t.Fatalf("after the failed commit, old is in %q and new in %q; want old in %s and no new", got[0], got[1], gen)
	}
	nextID := -1
	if err := s.db.Update(func(tx *bolt.Tx) error { nextID = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	if nextID != failedID {
		t.Fatalf("the write after the failed commit has id %d, the failed one had %d: the test no longer sees an id given twice", nextID, failedID)
	}

	s.db.View(func(tx *bolt.Tx) error {
		lookupsAgree(t, tx, []string{"old", "new"}, "after the failed commit")
		return nil
	})
	res, err := s.Claim(ctx, storekit.ClaimRequest{Key: "old", Tool: "t", Owner: "B", Now: t0.Add(time.Second), Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed || res.Record.State != agenttool.Succeeded {
		t.Errorf("old, settled before the failed commit: claimed %v, state %v; want its success replayed, not a second run",
			res.Claimed, res.Record.State)
	}
}

// What a lookup may skip, in every snapshot a reader holds, not only the
// last: readers begun between writes stay open across writes that settle,
// move, import, sweep, make generations again with a clock gone back, roll
// back, or fail to commit (the file may not grow: bbolt then gives the
// write's id to the next), and each finds every key where a lookup that
// walks every generation finds it. A claim of a settled key replays it.
func TestALookupInAnOpenSnapshotSkipsNoGenerationThatHoldsTheKey(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	const maxSize = 16 << 20
	s := openCapped(t, path, maxSize)
	defer func() { s.Close() }()
	var readers []*bolt.Tx
	release := func() {
		for _, r := range readers {
			r.Rollback()
		}
		readers = nil
	}
	defer release()
	tooBig := make([]byte, maxSize+1)
	rng := rand.New(rand.NewPCG(11, 5))
	t0 := time.Unix(1_780_000_000, 0)
	now := t0
	var keys []string
	settledAt := map[string]time.Time{} // settled keys, and until when they hold
	// horizon is the latest time of a write that committed: a write may
	// drop the generations that ended by its time, so only a key that
	// holds past it must be found, whatever the clock did since.
	horizon := t0
	pending := map[string]uint64{}
	lifetimes := []time.Duration{8 * time.Second, 80 * time.Second, 10 * time.Minute}
	failedCommits, rolledBack, replayed := 0, 0, 0
	// mess is a write that drops the generations ending within minutes (a
	// sweep whose clock runs ahead) and settles keys whose clock is behind,
	// which may make them again.
	mess := func(tx *bolt.Tx, step int) error {
		if _, err := dropEnded(tx, now.Add(time.Duration(rng.IntN(600))*time.Second), genStep, genWhole); err != nil {
			return err
		}
		for i := range 1 + rng.IntN(5) {
			key := fmt.Sprintf("mess/%d/%d", step, i)
			keys = append(keys, key)
			exp := now.Add(lifetimes[rng.IntN(len(lifetimes))] + time.Duration(rng.IntN(600)-300)*time.Second)
			r := succeeded(key, now, exp.Sub(now))
			if err := saveAt(tx.Bucket(recordsBucket), &r, nil, time.Time{}); err != nil {
				return err
			}
		}
		return nil
	}
	for step := range 800 {
		now = now.Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
		switch op := rng.IntN(100); {
		case op < 35: // a new action, settled at once
			var key string
			keys, key = newKey(keys)
			ttl := lifetimes[rng.IntN(len(lifetimes))]
			settle(t, s, "t", key, now, ttl)
			settledAt[key] = now.Add(ttl)
		case op < 42: // a new action left pending
			var key string
			keys, key = newKey(keys)
			pending[key] = claimNew(t, s, key, now)
		case op < 50: // a pending action settles: it moves into a generation
			for key, token := range pending {
				ttl := lifetimes[rng.IntN(len(lifetimes))]
				if err := s.Finish(ctx, storekit.FinishRequest{Key: key, Token: token, State: agenttool.Succeeded, Attempts: 1,
					Outcome: []byte(`{}`), Now: now, TTL: ttl}); err != nil {
					t.Fatal(err)
				}
				delete(pending, key)
				settledAt[key] = now.Add(ttl)
				break
			}
		case op < 55: // the clock goes back by up to two minutes
			now = now.Add(-time.Duration(rng.IntN(120)) * time.Second)
		case op < 62: // a sweep
			limit := []int{0, 0, 1, 50}[rng.IntN(4)]
			at := now.Add(time.Duration(rng.IntN(200)) * time.Second)
			if _, err := s.Sweep(ctx, storekit.SweepRequest{Now: at, Limit: limit}); err != nil {
				t.Fatal(err)
			}
			horizon = maxTime(horizon, at)
		case op < 66: // an import into generations, some of them new
			keys = importSome(t, s, rng, now, lifetimes, keys)
		case op < 74: // such a write, rolled back
			err := s.db.Update(func(tx *bolt.Tx) error {
				if err := mess(tx, step); err != nil {
					return err
				}
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				t.Fatal(err)
			}
			rolledBack++
		case op < 82: // such a write, whose commit fails
			err := s.db.Update(func(tx *bolt.Tx) error {
				if err := mess(tx, step); err != nil {
					return err
				}
				scratch, err := tx.CreateBucketIfNotExists([]byte("scratch"))
				if err != nil {
					return err
				}
				return scratch.Put([]byte("big"), tooBig)
			})
			if !errors.Is(err, berrors.ErrMaxSizeReached) {
				t.Fatalf("a write that needs more than the file may hold: %v", err)
			}
			failedCommits++
		case op < 95: // a reader begins, and stays open
			r, err := s.db.Begin(false)
			if err != nil {
				t.Fatal(err)
			}
			readers = append(readers, r)
			if len(readers) > 4 {
				readers[0].Rollback()
				readers = readers[1:]
			}
		default: // the process restarts
			release()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openCapped(t, path, maxSize)
		}
		horizon = maxTime(horizon, now)
		if step%40 == 39 {
			for _, r := range readers {
				lookupsAgree(t, r, keys, fmt.Sprintf("step %d, in the snapshot of write %d", step, r.ID()))
			}
			s.db.View(func(tx *bolt.Tx) error {
				lookupsAgree(t, tx, keys, fmt.Sprintf("step %d", step))
				return nil
			})
			tried := 0
			for key, until := range settledAt { // in no order
				if !until.After(horizon) {
					continue
				}
				if tried++; tried > 40 {
					break
				}
				res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "t", Owner: "B", Now: now, Lease: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if res.Claimed {
					t.Fatalf("step %d: %s, settled until %v, was claimed anew at %v: its tool would run again", step, key, until, now)
				}
				replayed++
			}
		}
	}
	if failedCommits < 20 || rolledBack < 20 || replayed < 300 {
		t.Errorf("%d commits failed, %d writes rolled back, %d claims replayed: too few to tell", failedCommits, rolledBack, replayed)
	}
	if names, held := gensLeft(s); len(names) < 8 || held < 200 {
		t.Errorf("the run left %d generations holding %d records: too few to tell", len(names), held)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
