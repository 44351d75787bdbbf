package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// schemaVersion is the layout of the file this package writes and reads.
// Version 4 has the scope index of scope.go, version 5 the expiry index,
// version 6 the slot index of slot.go, version 7 the generations of
// gens.go; files of earlier versions are upgraded at Open by building what
// they lack (a file of version 6 keeps its settled records in the records
// bucket, where they are swept one by one, and settles new ones into
// generations); version 8 writes records in format 3 (record.go), which
// versions before it cannot read: a file of version 7 needs nothing built;
// version 9 indexes the records beside their session's slot by principal
// too (slot.go): the index of version 8 and earlier is dropped and built
// again; version 10 writes a marked record in format 5 (record.go: the
// action it stands in for), which versions before it cannot read: a file
// of version 9 needs nothing built; version 11 indexes beside their slot
// the records closed as replaced that keep a mark (storekit.Record.Beside),
// and keeps them out of the generations: such records move out of the
// generations of earlier versions, and the beside index is built again;
// version 12 keeps a marked record's lifetime (Expires) apart from its
// mark, and indexes it by when it may go (storekit.Record.SweepAt), which
// versions before it would take for its lifetime, sweeping it while the
// mark lasts: in a file of an earlier version a record marked until its
// model is told had its lifetime overwritten, and is given one back
// (giveBackLifetimes); and it indexes beside their slot the records closed
// as replaced that keep a mark whatever their fence: they move out of the
// generations, and the beside index is built again.
const schemaVersion = "12"

var (
	metaBucket    = []byte("retrysafe/meta")
	recordsBucket = []byte("retrysafe/records")
	// openBucket indexes the keys of pending and unresolved unknown records,
	// so that listing what awaits reconciliation does not read every record.
	openBucket = []byte("retrysafe/open")
	// scopeBucket indexes the same records by tool, principal and session
	// (see scopeKey), so that the unknown fence finds a scope's open
	// records with one seek.
	scopeBucket = []byte("retrysafe/scope")
	// expiryBucket indexes the records of the records bucket and the
	// pending bucket that have a lifetime by its end (expiryKey), so that
	// a sweep reads only what it deletes. Records in generations have no
	// entry: a sweep drops or cuts a generation whole (gens.go).
	expiryBucket = []byte("retrysafe/expiry")
	schemaKey    = []byte("schema")
	// unknownKey, in the meta bucket, counts the unknown records not yet
	// resolved (uint64, big-endian): CountUnknown reads one value.
	unknownKey = []byte("unknown")
)

// Options configure [Open]. A nil *Options means all defaults.
type Options struct {
	// LockTimeout is how long Open waits for another process to release the
	// file lock. 0 means 1s; it is never unbounded.
	LockTimeout time.Duration
	// FileMode is the mode of a new file. 0 means 0600.
	FileMode os.FileMode
	// ReadOnly opens an existing store for reading only, with a shared lock:
	// several read-only opens may share the file, but none may share it
	// with a process that has it open for writing (bbolt locks the file),
	// so Open fails after LockTimeout while the application runs. Nothing
	// is written, not even the lease endings of an ordinary Open; every
	// write answers an error wrapping [ErrReadOnly].
	ReadOnly bool
	// KeepSchema makes Open fail rather than upgrade a store of an older
	// schema: for a program that must not change a store's version under
	// the application that owns it (cmd/retrysafe), which could then no
	// longer open it.
	KeepSchema bool
}

// ErrReadOnly is the error of a write to a store opened with
// Options.ReadOnly.
var ErrReadOnly = errors.New("the store is open read-only")

// Store is a bbolt-backed store. It is safe for concurrent use by the
// goroutines of one process.
type Store struct {
	db       *bolt.DB
	path     string
	writes   groupCommit
	readOnly bool
}

var (
	_ storekit.Store          = (*Store)(nil)
	_ storekit.LocalStore     = (*Store)(nil)
	_ storekit.Counter        = (*Store)(nil)
	_ storekit.Importer       = (*Store)(nil)
	_ storekit.SweepStepBound = (*Store)(nil)
)

// Local reports true: the store never waits on a network (see
// storekit.LocalStore).
func (s *Store) Local() bool { return true }

// Open opens or creates the store file at path. It fails with a clear error
// if another process holds the file, if the file is not a bbolt database or
// is damaged, or if it was written by an incompatible version.
func Open(path string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.FileMode == 0 {
		o.FileMode = 0o600
	}
	if o.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("boltstore: no store to open read-only: %w", err)
		}
	}
	db, err := bolt.Open(path, o.FileMode, boltOptions(o))
	switch {
	case errors.Is(err, berrors.ErrTimeout) && o.ReadOnly:
		return nil, fmt.Errorf("boltstore: %s is open in another process, which holds it for writing: bbolt lets no other process read the file meanwhile. "+
			"Run the operator commands inside that application (package agenttool/opcmd, with its own tools), or stop it first: %w", path, err)
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("boltstore: %s is locked by another process (bbolt allows one process per file; share pgstore between replicas): %w", path, err)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, fmt.Errorf("boltstore: %s is not a usable bbolt database (corrupt, or another kind of file): %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	if o.ReadOnly {
		if err := db.View(checkSchema); err != nil {
			db.Close()
			return nil, fmt.Errorf("boltstore: %s: %w", path, err)
		}
		if err := buildFilters(db); err != nil {
			db.Close()
			return nil, fmt.Errorf("boltstore: %s: reading the generations' keys: %w", path, err)
		}
		return &Store{db: db, path: path, readOnly: true}, nil
	}
	if o.KeepSchema {
		if err := db.View(checkSchema); err != nil && !errors.Is(err, errNoStore) {
			db.Close()
			return nil, fmt.Errorf("boltstore: %s: %w (this program does not upgrade it: upgrade the application that owns the store first)", path, err)
		}
	}
	if err := db.Update(initSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("boltstore: %s: %w", path, err)
	}
	if err := buildFilters(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("boltstore: %s: reading the generations' keys: %w", path, err)
	}
	return &Store{db: db, path: path, writes: groupCommit{db: db}}, nil
}

// errNoStore: the file holds no retrysafe store (yet).
var errNoStore = errors.New("the file is not a retrysafe store")

// checkSchema makes sure a store opened read-only has the current schema,
// which only a read-write Open can upgrade.
func checkSchema(tx *bolt.Tx) error {
	meta := tx.Bucket(metaBucket)
	if meta == nil {
		return errNoStore
	}
	if v := string(meta.Get(schemaKey)); v != schemaVersion {
		return fmt.Errorf("the store has schema %q and this version of retrysafe reads %q; open it read-write once to upgrade it", v, schemaVersion)
	}
	return nil
}

func initSchema(tx *bolt.Tx) error {
	meta := tx.Bucket(metaBucket)
	if meta == nil {
		empty := true
		_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
		if !empty {
			return errors.New("the file holds other data and is not a retrysafe store")
		}
		var err error
		if meta, err = tx.CreateBucket(metaBucket); err != nil {
			return err
		}
		if err := meta.Put(schemaKey, []byte(schemaVersion)); err != nil {
			return err
		}
	}
	v := string(meta.Get(schemaKey))
	if v != "1" && v != "2" && v != "3" && v != "4" && v != "5" && v != "6" && v != "7" && v != "8" && v != "9" && v != "10" && v != "11" && v != schemaVersion {
		return fmt.Errorf("the store has schema %q; this version of retrysafe reads schema %q", v, schemaVersion)
	}
	if tx.Bucket(oldBesideBucket) != nil {
		if err := tx.DeleteBucket(oldBesideBucket); err != nil {
			return err
		}
	}
	fillBeside := tx.Bucket(besideBucket) == nil
	for _, name := range [][]byte{recordsBucket, openBucket, effectsBucket, scopeBucket, expiryBucket, slotsBucket, besideBucket, gensBucket, pendingBucket, pendingSlotsBucket} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	if v != schemaVersion {
		// Version 6 lacks only the generations and the pending buckets,
		// made above; its pending records and their slots move there when
		// next written. Versions 7 to 11 lack only the beside index of
		// this version, built below.
		if v != "6" && v != "7" && v != "8" && v != "9" && v != "10" {
			if err := rebuildScopes(tx); err != nil {
				return fmt.Errorf("upgrading schema %s to %s: %w", v, schemaVersion, err)
			}
			if err := rebuildExpiry(tx); err != nil {
				return fmt.Errorf("upgrading schema %s to %s: %w", v, schemaVersion, err)
			}
			if err := assignLegacySlots(tx); err != nil {
				return fmt.Errorf("upgrading schema %s to %s: %w", v, schemaVersion, err)
			}
		}
		fillBeside = true
		if err := unplain(tx); err != nil {
			return fmt.Errorf("upgrading schema %s to %s: %w", v, schemaVersion, err)
		}
		if err := giveBackLifetimes(tx); err != nil {
			return fmt.Errorf("upgrading schema %s to %s: %w", v, schemaVersion, err)
		}
		if err := meta.Put(schemaKey, []byte(schemaVersion)); err != nil {
			return err
		}
	}
	if fillBeside {
		if err := rebuildBeside(tx); err != nil {
			return fmt.Errorf("indexing the open records beside their session's slot: %w", err)
		}
	}
	return expireLeases(tx)
}

// expireLeases ends the leases of pending records at Open. bbolt locks the
// file to one process, so a pending record found at Open was left by a
// process that is gone: its action is unknown now, not in a minute. A
// lease that ends later ends now instead (not in the past), so that a
// takeover still waits out a request the dead process may have had in
// flight (AttemptTimeout plus ClockSkew, from now) before it trusts "not
// applied". A lease that has already ended is left as it is: that wait
// counts from its end by this machine's clock, so a clock that jumped
// forward across the restart by more than ClockSkew shortens it, as it
// does on every store (the caveat on clocks in agenttool's package doc).
func expireLeases(tx *bolt.Tx) error {
	b := tx.Bucket(recordsBucket)
	var keys []string
	tx.Bucket(openBucket).ForEach(func(k, _ []byte) error { keys = append(keys, string(k)); return nil })
	for _, k := range keys {
		rec, err := load(b, k)
		if err != nil || rec == nil || rec.State != storekit.Pending {
			continue // unreadable records stay as they are, failing closed when used
		}
		prev := *rec
		if now := time.Now(); rec.LeaseExpiry.After(now) {
			rec.LeaseExpiry = now
		}
		if err := save(b, rec, &prev); err != nil {
			return err
		}
	}
	return nil
}

// Path returns the file's path.
func (s *Store) Path() string { return s.path }

// Close closes the file. Later calls fail, and guarded tools using the store
// answer store_unavailable.
func (s *Store) Close() error {
	err := s.db.Close()
	forgetFilters(s.db)
	return err
}

// DB returns the underlying bbolt database, for effects that must commit in
// the same transaction as their record (see [Store.Effect]) and for
// inspection. Do not write to retrysafe's buckets.
func (s *Store) DB() *bolt.DB { return s.db }

// update runs fn in a write transaction, through group commit.
func (s *Store) update(ctx context.Context, fn func(b *bolt.Bucket) error) error {
	if s.readOnly {
		return fmt.Errorf("boltstore: %s: %w", s.path, ErrReadOnly)
	}
	return s.writes.update(ctx, func(tx *bolt.Tx) error { return fn(tx.Bucket(recordsBucket)) })
}

// openIndex returns the index bucket of the transaction that owns b.
func openIndex(b *bolt.Bucket) *bolt.Bucket { return b.Tx().Bucket(openBucket) }

func (s *Store) view(ctx context.Context, fn func(b *bolt.Bucket) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(func(tx *bolt.Tx) error { return fn(tx.Bucket(recordsBucket)) })
}

// errNeedsWrite stops a read-only claim that would change the record.
var errNeedsWrite = errors.New("claim needs a write")

// Claim implements storekit.Store. A claim that changes nothing (a replay,
// a live lease) is answered from a read transaction, without a disk write.
func (s *Store) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	var res storekit.ClaimResult
	err := s.view(ctx, func(b *bolt.Bucket) error {
		existing, occs, err := loadClaim(b, &req)
		if err != nil {
			return err
		}
		d, err := storekit.DecideClaim(existing, occs, req, func() (uint64, error) { return 0, errNeedsWrite })
		if err != nil {
			return err
		}
		if d.Write || len(d.Occupants) > 0 {
			return errNeedsWrite
		}
		res = d.Result
		return nil
	})
	if err == nil {
		return res, nil
	}
	if !errors.Is(err, errNeedsWrite) {
		return res, err
	}
	err = s.update(ctx, func(b *bolt.Bucket) error {
		existing, occs, err := loadClaim(b, &req)
		if err != nil {
			return err
		}
		d, err := storekit.DecideClaim(existing, occs, req, b.NextSequence)
		if err != nil {
			return err
		}
		res = d.Result
		for i := range d.Occupants {
			o := &d.Occupants[i]
			prev := occs[slices.IndexFunc(occs, func(r storekit.Record) bool { return r.Key == o.Key })]
			if err := save(b, o, &prev); err != nil {
				return err
			}
		}
		if !d.Write {
			return nil
		}
		if existing != nil && existing.Sweepable(req.Now) {
			// A fresh action over an expired one: the old action's effect
			// is not this one's.
			if err := b.Tx().Bucket(effectsBucket).Delete([]byte(req.Key)); err != nil {
				return err
			}
		}
		return save(b, &res.Record, existing)
	})
	return res, err
}

// loadClaim reads what a claim decides on: the record of its key, and its
// occupants (see occupants).
func loadClaim(b *bolt.Bucket, req *storekit.ClaimRequest) (existing *storekit.Record, occs []storekit.Record, err error) {
	if existing, err = load(b, req.Key); err != nil {
		return nil, nil, err
	}
	occs, err = occupants(b, req)
	return existing, occs, err
}

// Finish implements storekit.Store. A key under which an effect committed
// ([Store.Effect]) cannot be recorded as failed, nor approved for another
// attempt: storekit.ErrEffectApplied.
func (s *Store) Finish(ctx context.Context, req storekit.FinishRequest) error {
	return s.update(ctx, func(b *bolt.Bucket) error {
		existing, err := load(b, req.Key)
		if err != nil {
			return err
		}
		rec, err := storekit.DecideFinish(existing, req)
		if err != nil {
			return err
		}
		if (rec.State == storekit.Failed || rec.RetryApproved) && applied(b, req.Key) {
			return fmt.Errorf("boltstore: %s cannot be recorded as not applied: %w", req.Key, storekit.ErrEffectApplied)
		}
		return save(b, &rec, existing)
	})
}

// Release implements storekit.Store. A key under which an effect committed
// ([Store.Effect]) is never released: storekit.ErrEffectApplied.
func (s *Store) Release(ctx context.Context, key string, token uint64) error {
	return s.update(ctx, func(b *bolt.Bucket) error {
		existing, err := load(b, key)
		if err != nil {
			return err
		}
		if err := storekit.DecideRelease(existing, key, token); err != nil {
			return err
		}
		if applied(b, key) {
			return fmt.Errorf("boltstore: %s cannot be released: %w", key, storekit.ErrEffectApplied)
		}
		return remove(b, []byte(key), existing)
	})
}

// applied reports whether an effect committed under key.
func applied(b *bolt.Bucket, key string) bool {
	return b.Tx().Bucket(effectsBucket).Get([]byte(key)) != nil
}

// Mark implements storekit.Store.
func (s *Store) Mark(ctx context.Context, req storekit.MarkRequest) (storekit.Record, error) {
	var out storekit.Record
	err := s.update(ctx, func(b *bolt.Bucket) error {
		existing, err := load(b, req.Key)
		if err != nil {
			return err
		}
		rec, write, err := storekit.DecideMark(existing, req)
		if err != nil {
			return err
		}
		out = rec
		if !write {
			return nil
		}
		return save(b, &rec, existing)
	})
	if err != nil {
		return storekit.Record{}, err
	}
	return out, nil
}

// Renew implements storekit.Store.
func (s *Store) Renew(ctx context.Context, req storekit.RenewRequest) error {
	return s.update(ctx, func(b *bolt.Bucket) error {
		existing, err := load(b, req.Key)
		if err != nil {
			return err
		}
		rec, err := storekit.DecideRenew(existing, req)
		if err != nil {
			return err
		}
		return save(b, &rec, existing)
	})
}

// Get implements storekit.Store.
func (s *Store) Get(ctx context.Context, key string) (storekit.Record, error) {
	var rec *storekit.Record
	err := s.view(ctx, func(b *bolt.Bucket) error {
		var err error
		rec, err = load(b, key)
		return err
	})
	if err != nil {
		return storekit.Record{}, err
	}
	if rec == nil {
		return storekit.Record{}, fmt.Errorf("boltstore: %s: %w", key, storekit.ErrNotFound)
	}
	return *rec, nil
}

// sweepStep is the records a sweep step deletes one by one unless asked
// otherwise: small, because calls wait for the step's write transaction.
const sweepStep = 50

// MaxSweepStep implements storekit.SweepStepBound: a step deletes
// SweepGrowth times the store's own step at most, whatever it is asked,
// so that calls wait behind one short commit at most.
func (s *Store) MaxSweepStep() int { return storekit.SweepGrowth * sweepStep }

// Sweep implements storekit.Store: one step, in one write transaction. It
// first deletes the records of generations whose windows have ended
// (gens.go): a small generation whole, at a cost that hardly grows with
// its records, a big one cut down over several steps — up to the step's
// limit, or for a step the store sizes itself (req.Limit 0) up to 1,024
// records and one generation of up to 8,192 whole. Then it deletes
// records of the records bucket one by one, oldest expiry first, reading
// its expiry index from the oldest entries, so that its cost grows with
// the records it deletes. Calls wait behind one step at most, of about a
// millisecond. A settled record whose generation has not ended stays
// until it does (see gens.go), even if it expired.
func (s *Store) Sweep(ctx context.Context, req storekit.SweepRequest) (int, error) {
	own := req.Limit <= 0
	limit := req.Limit
	if own {
		limit = sweepStep
	}
	limit = min(limit, s.MaxSweepStep())
	n := 0
	var corrupt []error
	err := s.update(ctx, func(b *bolt.Bucket) error {
		n, corrupt = 0, corrupt[:0] // the function may run twice
		// Generations that ended first: whole, or cut down from their
		// ends (gens.go), up to genStep records in a step of the
		// store's own size and the step's limit otherwise.
		budget, slack := limit, 0
		if own {
			budget, slack = genStep, genWhole
		}
		dropped, err := dropEnded(b.Tx(), req.Now, budget, slack)
		if err != nil {
			return err
		}
		n += dropped
		if !own {
			limit = max(0, limit-dropped)
		}
		// The records bucket's index entries due by now, oldest first,
		// up to four steps' worth. Every entry used is consumed (its
		// record deleted, or the entry dropped from the index), so that
		// no entry can hold a later step back.
		type entry struct {
			k []byte
			p place
		}
		var due []entry
		deadline := nanos(req.Now)
		collect := func(p place, most int) {
			c := p.expiry.Cursor()
			for k, _ := c.First(); k != nil && most > 0; k, _ = c.Next() {
				if at, _ := splitExpiryKey(k); at > deadline {
					break
				}
				due = append(due, entry{slices.Clone(k), p})
				most--
			}
		}
		collect(place{records: b, expiry: b.Tx().Bucket(expiryBucket)}, 4*limit)
		slices.SortStableFunc(due, func(x, y entry) int { return bytes.Compare(x.k, y.k) })
		deleted := 0
		for _, e := range due {
			if deleted == limit {
				break
			}
			at, key := splitExpiryKey(e.k)
			var rec *storekit.Record
			v := e.p.records.Get(key)
			var err error
			if v != nil {
				var r storekit.Record
				if r, err = decode(key, v); err == nil {
					rec = &r
				}
			}
			switch {
			case err == nil && rec != nil && expiryAt(rec) == at && rec.Sweepable(req.Now):
				if err := remove(b, key, rec); err != nil {
					return err
				}
				deleted++
				continue
			case err != nil:
				// Left in place and reported, out of the index: it is not
				// swept until an operator deals with it.
				corrupt = append(corrupt, &storekit.CorruptRecordError{Key: string(key), Err: err})
			}
			// A stale entry (the record changed or went), an unreadable
			// record's, or a record that time alone never makes sweepable:
			// a write of the record indexes it again.
			if err := e.p.expiry.Delete(e.k); err != nil {
				return err
			}
		}
		n += deleted
		return nil
	})
	if err != nil {
		return n, err
	}
	return n, errors.Join(corrupt...)
}

// ListUnknown implements storekit.Store. It reads in one transaction;
// unreadable records are reported as an error, never skipped.
func (s *Store) ListUnknown(ctx context.Context, req storekit.ListRequest) ([]storekit.Record, error) {
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	var out []storekit.Record
	if req.Tool != "" && req.Principal != nil {
		var corrupt error
		err := s.view(ctx, func(b *bolt.Bucket) error {
			out, corrupt = listScope(b, req, limit)
			return nil
		})
		if err != nil {
			return nil, err
		}
		return out, corrupt
	}
	err := s.view(ctx, func(b *bolt.Bucket) error {
		c := openIndex(b).Cursor()
		k, _ := c.First()
		if req.After != "" {
			k, _ = c.Seek([]byte(req.After))
			if k != nil && string(k) == req.After {
				k, _ = c.Next()
			}
		}
		// An unreadable record counts towards the page: a short page
		// still means the end.
		var corrupt []error
		for ; k != nil && len(out)+len(corrupt) < limit; k, _ = c.Next() {
			rec, err := load(b, string(k))
			if err == nil && rec == nil {
				err = errors.New("the open index names it, but it has no record")
			}
			if err != nil {
				corrupt = append(corrupt, &storekit.CorruptRecordError{Key: string(k), Err: err}) // skipped, reported, left in place
				continue
			}
			if req.Lists(rec) {
				out = append(out, *rec)
			}
		}
		return errors.Join(corrupt...)
	})
	return out, err
}

// Count implements storekit.Counter. It reads every record, in one read
// transaction, those of generations included (until a sweep drops their
// generation, expired records count).
func (s *Store) Count(ctx context.Context, req storekit.CountRequest) ([]storekit.Count, error) {
	tally := map[storekit.Count]int{}
	count := func(k, v []byte) error {
		if v == nil {
			return nil // a nested bucket
		}
		rec, err := decode(k, v)
		switch {
		case err != nil && req.Principal == nil: // whose it is cannot be told
			tally[storekit.Count{}]++
		case err != nil:
		case req.Principal == nil || rec.Principal == *req.Principal:
			tally[storekit.Count{Tool: rec.Tool, State: rec.State, RetryApproved: rec.RetryApproved}]++
		}
		return ctx.Err()
	}
	err := s.view(ctx, func(b *bolt.Bucket) error {
		if err := b.ForEach(count); err != nil {
			return err
		}
		if pb := b.Tx().Bucket(pendingBucket); pb != nil {
			if err := pb.ForEach(count); err != nil {
				return err
			}
		}
		return forEachGen(b.Tx(), func(p place) error { return p.records.ForEach(count) })
	})
	if err != nil {
		return nil, err
	}
	return storekit.SortCounts(tally), nil
}

// Import implements storekit.Importer, in one write transaction: chunk a
// large import (ten thousand records a call is a good size).
func (s *Store) Import(ctx context.Context, recs []storekit.Record) error {
	for i := range recs {
		if err := storekit.ValidateImport(&recs[i]); err != nil {
			return err
		}
	}
	return s.update(ctx, func(b *bolt.Bucket) error {
		if err := storekit.CheckImportSlots(recs, func(sl storekit.Slot) (string, error) { return string(slotHolder(b, slotKey(sl))), nil }); err != nil {
			return fmt.Errorf("boltstore: %w", err)
		}
		// In key order: bbolt keeps a transaction's nodes whole until it
		// commits, and each put in the middle of a node moves the rest of
		// it, so a large import in random order took time growing with its
		// square (100,000 records in one call: 13.2 s, against 1.3 s in
		// key order; BenchmarkImportOfManyRecordsInOneCall).
		order := make([]int, len(recs))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(i, j int) int { return strings.Compare(recs[i].Key, recs[j].Key) })
		var top uint64
		for _, i := range order {
			r := &recs[i]
			if _, v := find(b, []byte(r.Key)); v != nil {
				return fmt.Errorf("boltstore: importing %s: the key exists: %w", r.Key, storekit.ErrInvalidRequest)
			}
			// An imported record's times are data, not a clock: its
			// write drops no generation.
			if err := saveAt(b, r, nil, time.Time{}); err != nil {
				return err
			}
			top = max(top, r.Token)
		}
		if top > b.Sequence() { // later claims' tokens come from the sequence
			return b.SetSequence(top)
		}
		return nil
	})
}

// CountUnknown implements storekit.Counter: it reads one counter, kept
// with every write that changes it.
func (s *Store) CountUnknown(ctx context.Context) (int, error) {
	n := 0
	err := s.view(ctx, func(b *bolt.Bucket) error {
		if v := b.Tx().Bucket(metaBucket).Get(unknownKey); len(v) == 8 {
			n = int(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	return n, err
}

func load(b *bolt.Bucket, key string) (*storekit.Record, error) {
	_, v := find(b, []byte(key))
	if v == nil {
		return nil, nil
	}
	rec, err := decode([]byte(key), v)
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// placeFor returns where r belongs: the pending bucket if it is pending, a
// generation if it is plain, the records bucket b otherwise. A generation
// it starts may first drop those that ended by now (see genFor): zero
// drops none.
func placeFor(b *bolt.Bucket, r *storekit.Record, now time.Time) (place, error) {
	switch {
	case r.State == storekit.Pending:
		return place{pending: true, records: b.Tx().Bucket(pendingBucket), expiry: b.Tx().Bucket(expiryBucket)}, nil
	case plain(r) && !applied(b, r.Key):
		settled := r.Updated
		if settled.IsZero() {
			settled = r.Created
		}
		return genFor(b.Tx(), genName(r.SweepAt(), settled), now)
	}
	return place{records: b, expiry: b.Tx().Bucket(expiryBucket)}, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// expiryAt is the expiry index's time for r, when it may be swept
// (Record.SweepAt; 0: r has no entry); r may be nil.
func expiryAt(r *storekit.Record) int64 {
	if r == nil || r.State == 0 || r.Expires.IsZero() {
		return 0
	}
	return nanos(r.SweepAt())
}

// save writes r, which replaces prev (nil for a new record), where it
// belongs (moving it there if prev lived elsewhere), and keeps the indexes.
// r's Updated is the time of the write, the caller's: a generation it
// starts drops those that ended by then and by the machine's clock, so
// that a caller's clock that jumped ahead, for one write, takes away no
// record that has not expired.
func save(b *bolt.Bucket, r, prev *storekit.Record) error {
	return saveAt(b, r, prev, minTime(r.Updated, time.Now()))
}

// saveAt is save, dropping the generations that ended by now if it starts
// one (zero: none).
func saveAt(b *bolt.Bucket, r, prev *storekit.Record, now time.Time) error {
	key := []byte(r.Key)
	to, err := placeFor(b, r, now)
	if err != nil {
		return err
	}
	before := expiryAt(prev)
	if prev != nil {
		if from, _ := find(b, key); from.records != nil && !from.same(to) {
			if err := from.del(key, before); err != nil {
				return err
			}
			before = 0 // its entry went with it
		}
	}
	if err := to.put(key, encode(r)); err != nil {
		return err
	}
	if after := expiryAt(r); before != after && to.expiry != nil {
		if before != 0 {
			if err := to.expiry.Delete(expiryKey(before, r.Key)); err != nil {
				return err
			}
		}
		if after != 0 {
			if err := to.expiry.Put(expiryKey(after, r.Key), nil); err != nil {
				return err
			}
		}
	}
	if err := recountUnknown(b.Tx(), r, prev); err != nil {
		return err
	}
	if err := reindexScope(b, r, prev); err != nil {
		return err
	}
	if err := reslot(b.Tx(), r, prev); err != nil {
		return err
	}
	if err := rebeside(b.Tx(), r, prev); err != nil {
		return err
	}
	if r.Open() {
		return openIndex(b).Put(key, []byte{})
	}
	return openIndex(b).Delete(key)
}

// remove deletes the record of key, rec (nil if unreadable), with its index
// entries and its effect.
func remove(b *bolt.Bucket, key []byte, rec *storekit.Record) error {
	if from, _ := find(b, key); from.records != nil {
		if err := from.del(key, expiryAt(rec)); err != nil {
			return err
		}
	}
	if err := b.Tx().Bucket(effectsBucket).Delete(key); err != nil {
		return err
	}
	if rec != nil {
		if err := recountUnknown(b.Tx(), &storekit.Record{Key: rec.Key}, rec); err != nil {
			return err
		}
		if err := reindexScope(b, &storekit.Record{}, rec); err != nil {
			return err
		}
		if err := reslot(b.Tx(), nil, rec); err != nil {
			return err
		}
		if err := rebeside(b.Tx(), nil, rec); err != nil {
			return err
		}
	}
	return openIndex(b).Delete(key)
}
