package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

var _ storekit.Exporter = (*Store)(nil)

// exportQuery reads one page of records by the primary key's index, in the
// order of its collation (the database's, unless the schema says
// otherwise).
func (s *Store) exportQuery() string {
	return `SELECT ` + selected("") + ` FROM ` + pgx.Identifier{s.schema, "records"}.Sanitize() + ` WHERE key > $1 ORDER BY key LIMIT $2`
}

// Export implements storekit.Exporter: one statement a page, by the
// primary key's index, in the order of the database's collation.
func (s *Store) Export(ctx context.Context, after string, limit int) ([]storekit.Record, string, error) {
	if limit <= 0 {
		limit = storekit.DefaultExportLimit
	}
	rows, err := s.pool.Query(ctx, s.exportQuery(), after, limit)
	if err != nil {
		return nil, "", s.wrap("export", "", err)
	}
	defer rows.Close()
	var (
		out     []storekit.Record
		corrupt []error
		n       int
		last    string
	)
	for rows.Next() {
		rec, err := scanRecord(rows)
		var bad *storekit.CorruptRecordError
		switch {
		case errors.As(err, &bad):
			corrupt = append(corrupt, err)
			last = bad.Key
		case err != nil:
			return nil, "", s.wrap("export", "", err)
		default:
			out = append(out, *rec)
			last = rec.Key
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.wrap("export", "", err)
	}
	next := ""
	if n == limit {
		next = last
	}
	return out, next, errors.Join(corrupt...)
}
