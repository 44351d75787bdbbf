package pgstore

import "context"

// Versions is the number of migrations this package knows: the version of
// a schema it migrated.
var Versions = len(migrations)

// MigrateTo migrates the schema opts names up to version target only, and
// leaves it as a version of this package with target migrations would.
func MigrateTo(ctx context.Context, opts *Options, target int) (from, to int, err error) {
	s, err := connect(ctx, opts)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	return s.migrateTo(ctx, target)
}
