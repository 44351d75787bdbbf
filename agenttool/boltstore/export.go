package boltstore

import (
	"context"
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

var _ storekit.Exporter = (*Store)(nil)

// Export implements storekit.Exporter: one read transaction a page, in the
// byte order of keys, from the records bucket's own order (a seek, then
// the page). It reads records as they are, on a store opened read-only
// too, so it can copy the file of an application that is stopped without
// changing it (pending records keep their leases: see storekit.Copy).
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
		c := b.Cursor()
		k, v := c.First()
		if after != "" {
			k, v = c.Seek([]byte(after))
			if k != nil && string(k) == after {
				k, v = c.Next()
			}
		}
		n, last := 0, ""
		for ; k != nil && n < limit; k, v = c.Next() {
			if v == nil {
				continue // a nested bucket, not a record
			}
			n++
			last = string(k)
			rec, err := decode(k, v)
			if err != nil {
				corrupt = append(corrupt, &storekit.CorruptRecordError{Key: last, Err: err})
				continue
			}
			out = append(out, rec)
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
