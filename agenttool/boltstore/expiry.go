package boltstore

import (
	"encoding/binary"
	"errors"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// expiryKey is an entry of the expiry index: the end of a record's lifetime
// (Unix nanoseconds, big-endian with the sign bit flipped, so that keys sort
// by time), then the record's key.
func expiryKey(at int64, key string) []byte {
	k := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(k, uint64(at)^(1<<63))
	return append(k, key...)
}

func splitExpiryKey(k []byte) (at int64, key []byte) {
	if len(k) < 8 {
		return 0, nil
	}
	return int64(binary.BigEndian.Uint64(k) ^ (1 << 63)), k[8:]
}

// awaiting reports whether r counts as an unknown record not yet resolved
// (see Store.CountUnknown); r may be nil.
func awaiting(r *storekit.Record) bool {
	return r != nil && r.State == storekit.Unknown && !r.RetryApproved
}

// recountUnknown keeps the count of unknown records as r replaces prev
// (nil for a new record; an r with no State is a record deleted).
func recountUnknown(tx *bolt.Tx, r, prev *storekit.Record) error {
	switch was, is := awaiting(prev), r.State != 0 && awaiting(r); {
	case was && !is:
		return addUnknown(tx, -1)
	case is && !was:
		return addUnknown(tx, 1)
	}
	return nil
}

func addUnknown(tx *bolt.Tx, delta int64) error {
	meta := tx.Bucket(metaBucket)
	var n int64
	if v := meta.Get(unknownKey); len(v) == 8 {
		n = int64(binary.BigEndian.Uint64(v))
	}
	return putUnknown(meta, max(n+delta, 0))
}

func putUnknown(meta *bolt.Bucket, n int64) error {
	return meta.Put(unknownKey, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// rebuildExpiry builds the expiry index and the count of unknown records
// from the records: once, when a store of an older schema is opened.
func rebuildExpiry(tx *bolt.Tx) error {
	if err := tx.DeleteBucket(expiryBucket); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
		return err
	}
	idx, err := tx.CreateBucket(expiryBucket)
	if err != nil {
		return err
	}
	var unknown int64
	err = tx.Bucket(recordsBucket).ForEach(func(k, v []byte) error {
		rec, err := decode(k, v)
		if err != nil {
			return nil // unreadable records stay as they are, failing closed when used
		}
		if awaiting(&rec) {
			unknown++
		}
		at := expiryAt(&rec)
		if at == 0 {
			return nil
		}
		return idx.Put(expiryKey(at, rec.Key), nil)
	})
	if err != nil {
		return err
	}
	return putUnknown(tx.Bucket(metaBucket), unknown)
}

// giveBackLifetimes gives a lifetime back to each record that a version
// before schema 12 kept until storekit.UntilTold for its mark: it moved
// the record's Expires to the mark's end, which is in 2262 until the
// model is told, and telling never moved it back. The record's own
// lifetime was lost with it: it is given the longest lifetime of its
// tool's settled records (Expires less Updated, of those with no notice),
// and goes once that and its mark have ended (storekit.Record.SweepAt); a
// record of a tool with no such record stays as it was. Such records are
// few: in the records bucket while they keep their mark, in the
// generation of 2262 once it ended; the file is read whole for the
// lifetimes only if there is one.
func giveBackLifetimes(tx *bolt.Tx) error {
	told := nanos(storekit.UntilTold)
	b := tx.Bucket(recordsBucket)
	var kept []storekit.Record
	lives := map[string]time.Duration{}
	collect := func(k, v []byte) error {
		if rec, err := decode(k, v); err == nil && nanos(rec.Expires) == told {
			kept = append(kept, rec)
			lives[rec.Tool] = 0
		}
		return nil
	}
	if err := b.ForEach(collect); err != nil {
		return err
	}
	// And those settled since their mark ended, in the generation of
	// 2262, where their lifetime put them.
	if gens := tx.Bucket(gensBucket); gens != nil {
		c := gens.Cursor()
		from := binary.BigEndian.AppendUint64(nil, uint64(storekit.UntilTold.Unix())^(1<<63))
		for name, v := c.Seek(from); name != nil; name, v = c.Next() {
			if v != nil {
				continue
			}
			if err := gens.Bucket(name).Bucket(genRecords).ForEach(collect); err != nil {
				return err
			}
		}
	}
	if len(kept) == 0 {
		return nil
	}
	life := func(k, v []byte) error {
		rec, err := decode(k, v)
		if err != nil || !(rec.State == storekit.Succeeded || rec.State == storekit.Failed) ||
			rec.Expires.IsZero() || nanos(rec.Expires) == told || !rec.NoticeUntil.IsZero() {
			return nil
		}
		if l, ok := lives[rec.Tool]; ok && rec.Expires.Sub(rec.Updated) > l {
			lives[rec.Tool] = rec.Expires.Sub(rec.Updated)
		}
		return nil
	}
	if err := b.ForEach(life); err != nil {
		return err
	}
	if err := forEachGen(tx, func(p place) error { return p.records.ForEach(life) }); err != nil {
		return err
	}
	for i := range kept {
		rec := kept[i]
		if l := lives[rec.Tool]; l > 0 {
			rec.Expires = rec.Updated.Add(l)
			if err := saveAt(b, &rec, &kept[i], time.Time{}); err != nil {
				return err
			}
		}
	}
	return nil
}
