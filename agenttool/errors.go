package agenttool

import (
	"errors"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Errors of guarded tools and operators. Wrapped errors carry detail; test
// with errors.Is. The store's errors are package storekit's, named here too
// for the callers of an Operator.
var (
	// ErrInvalidOptions: a tool's options are inconsistent; the message says
	// which and why.
	ErrInvalidOptions = errors.New("invalid tool options")
	// ErrNotFound: the store has no record for the reference (or the
	// record is another principal's, for an Operator limited to one).
	ErrNotFound = storekit.ErrNotFound
	// ErrInvalidRequest: an Operator was asked something that cannot be
	// done (no one named as resolving, a result that is not JSON, a tool
	// it was not given).
	ErrInvalidRequest = storekit.ErrInvalidRequest
	// ErrCorrupt: a record could not be read; it is treated as taken (fail
	// closed), never as free.
	ErrCorrupt = storekit.ErrCorrupt
)

// CorruptKeys returns the keys of the records err reports as unreadable
// (see storekit.CorruptRecordError), in the order reported: what an
// Operator's listing skipped.
func CorruptKeys(err error) []string { return storekit.CorruptKeys(err) }
