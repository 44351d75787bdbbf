package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// The scope index finds the records of one tool and principal that await
// reconciliation — what the unknown fence asks for on every claim — reading
// only those records, however many others the scope holds:
//
//	tool 0x00 principal 'u' session key            an unknown record, not resolved,
//	                                               or a pending one taken over from one
//	tool 0x00 principal 'p' lease session key      another pending record, by lease expiry
//
// The 'u' records all hold the fence. Other pending ones do once their
// lease has expired: a cursor over the 'p' entries, in lease order, stops
// at the first live lease. Leases are 8 bytes, big-endian Unix nanoseconds offset
// so that their order is the times' order.
const (
	kindUnknown = 'u'
	kindPending = 'p'
)

// scopeKey is r's key in the scope index, or nil if r is not open.
func scopeKey(r *storekit.Record) []byte {
	if !r.Open() {
		return nil
	}
	k := make([]byte, 0, len(r.Tool)+1+32+1+8+32+len(r.Key))
	k = append(append(append(k, r.Tool...), 0), r.Principal[:]...)
	if r.State == storekit.Pending && !r.TakenOver {
		k = append(k, kindPending)
		k = binary.BigEndian.AppendUint64(k, leaseOrder(r.LeaseExpiry))
	} else {
		k = append(k, kindUnknown)
	}
	k = append(k, r.Session[:]...)
	return append(k, r.Key...)
}

// leaseOrder maps a time to a uint64 in the same order; the zero time (a
// lease ended at Open) comes first.
func leaseOrder(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano()) ^ 1<<63
}

// reindexScope replaces prev's scope index entry (if any) with r's.
func reindexScope(b *bolt.Bucket, r, prev *storekit.Record) error {
	scopes := b.Tx().Bucket(scopeBucket)
	old, now := []byte(nil), scopeKey(r)
	if prev != nil {
		old = scopeKey(prev)
	}
	if old != nil && !bytes.Equal(old, now) {
		if err := scopes.Delete(old); err != nil {
			return err
		}
	}
	if now != nil {
		return scopes.Put(now, nil)
	}
	return nil
}

// rebuildScopes fills the scope index anew from the open index.
func rebuildScopes(tx *bolt.Tx) error {
	if err := tx.DeleteBucket(scopeBucket); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
		return err
	}
	if _, err := tx.CreateBucket(scopeBucket); err != nil {
		return err
	}
	b := tx.Bucket(recordsBucket)
	var recs []*storekit.Record
	err := tx.Bucket(openBucket).ForEach(func(k, _ []byte) error {
		if rec, err := load(b, string(k)); err == nil && rec != nil {
			recs = append(recs, rec)
		}
		return nil // unreadable records stay as they are, failing closed when used
	})
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := reindexScope(b, rec, nil); err != nil {
			return err
		}
	}
	return nil
}

// awaitingInScope calls fn with the key and session of every record of the
// tool and principal that holds the fence at now (storekit.Record.Fences),
// by the index alone, until fn returns false.
func awaitingInScope(b *bolt.Bucket, tool string, principal storekit.Digest, now time.Time, fn func(key string, session []byte) bool) {
	base := append(append([]byte(tool), 0), principal[:]...)
	c := b.Tx().Bucket(scopeBucket).Cursor()
	unknown := append(bytes.Clone(base), kindUnknown)
	for k, _ := c.Seek(unknown); k != nil && bytes.HasPrefix(k, unknown); k, _ = c.Next() {
		rest := k[len(unknown):]
		if len(rest) < 32 || !fn(string(rest[32:]), rest[:32]) {
			return
		}
	}
	pending := append(bytes.Clone(base), kindPending)
	limit := leaseOrder(now)
	for k, _ := c.Seek(pending); k != nil && bytes.HasPrefix(k, pending); k, _ = c.Next() {
		rest := k[len(pending):]
		if len(rest) < 8+32 || binary.BigEndian.Uint64(rest) > limit {
			return // this lease, and all after it, are live
		}
		if !fn(string(rest[8+32:]), rest[8:8+32]) {
			return
		}
	}
}

// listScope answers ListUnknown for one tool and principal (and session)
// from the scope index: it reads only the records that await
// reconciliation.
func listScope(b *bolt.Bucket, req storekit.ListRequest, limit int) ([]storekit.Record, error) {
	var keys []string
	awaitingInScope(b, req.Tool, *req.Principal, req.Now, func(key string, session []byte) bool {
		if key > req.After && (req.Session == nil || bytes.Equal(session, req.Session[:])) {
			keys = append(keys, key)
		}
		return true
	})
	slices.Sort(keys)
	var out []storekit.Record
	var corrupt []error
	for _, key := range keys {
		if len(out)+len(corrupt) >= limit {
			break
		}
		rec, err := load(b, key)
		if err == nil && rec == nil {
			err = errors.New("the scope index names it, but it has no record")
		}
		if err != nil {
			corrupt = append(corrupt, &storekit.CorruptRecordError{Key: key, Err: err})
			continue
		}
		if req.Lists(rec) {
			out = append(out, *rec)
		}
	}
	slices.SortFunc(out, func(x, y storekit.Record) int { return strings.Compare(x.Key, y.Key) })
	return out, errors.Join(corrupt...)
}
