package boltstore

import (
	"bytes"
	"context"
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

var _ storekit.Exporter = (*Store)(nil)

// Export implements storekit.Exporter: one read transaction a page, in the
// byte order of keys, merged from the orders of the records and pending
// buckets and of the generations (a seek in each, then the page). It reads
// records as they are, on a store opened read-only too, so it can copy the
// file of an application that is stopped without changing it (pending
// records keep their leases: see storekit.Copy).
//
// The results of effects ([Store.Effect]) are not records and are not
// exported: a record whose effect committed is exported as its state says
// (succeeded, or pending and unknown if its holder died before recording
// the outcome).
func (s *Store) Export(ctx context.Context, after string, limit int) ([]storekit.Record, string, error) {
	if limit <= 0 {
		limit = storekit.DefaultExportLimit
	}
	var (
		out     []storekit.Record
		next    string
		corrupt []error
	)
	err := s.view(ctx, func(b *bolt.Bucket) error {
		// The records bucket and every generation, merged by key: a key
		// lives in one place only.
		type head struct {
			c    *bolt.Cursor
			k, v []byte
		}
		var heads []*head
		start := func(bk *bolt.Bucket) {
			h := &head{c: bk.Cursor()}
			h.k, h.v = h.c.First()
			if after != "" {
				h.k, h.v = h.c.Seek([]byte(after))
				if h.k != nil && string(h.k) == after {
					h.k, h.v = h.c.Next()
				}
			}
			heads = append(heads, h)
		}
		start(b)
		if pb := b.Tx().Bucket(pendingBucket); pb != nil {
			start(pb)
		}
		forEachGen(b.Tx(), func(p place) error { start(p.records); return nil })
		n, last := 0, ""
		for n < limit {
			var h *head
			for _, x := range heads {
				for x.k != nil && x.v == nil { // a nested bucket, not a record
					x.k, x.v = x.c.Next()
				}
				if x.k != nil && (h == nil || bytes.Compare(x.k, h.k) < 0) {
					h = x
				}
			}
			if h == nil {
				break
			}
			n++
			last = string(h.k)
			rec, err := decode(h.k, h.v)
			if err != nil {
				corrupt = append(corrupt, &storekit.CorruptRecordError{Key: last, Err: err})
			} else {
				out = append(out, rec)
			}
			h.k, h.v = h.c.Next()
		}
		if n == limit {
			next = last
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, errors.Join(corrupt...)
}
