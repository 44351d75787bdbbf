package storekit

import (
	"errors"
	"fmt"
)

// Errors of stores. Wrapped errors carry detail; test with errors.Is.
var (
	// ErrNotFound: the store has no record for the key.
	ErrNotFound = errors.New("record not found")
	// ErrFenced: the caller no longer holds the pending record (its lease was
	// taken over, or the record was finished or released); it must not
	// change it.
	ErrFenced = errors.New("lease no longer held")
	// ErrCorrupt: a record could not be read. The key is treated as taken
	// (fail closed), never as free.
	ErrCorrupt = errors.New("record is corrupt")
	// ErrInvalidRequest: a store was called with arguments that break its
	// contract (a non-positive lease, an unknown final state).
	ErrInvalidRequest = errors.New("invalid store request")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store is closed")
	// ErrEffectApplied: a store refused to release a key, or to record it as
	// failed, because an effect committed under it (boltstore.Store.Effect).
	// The action happened, whatever the tool reported afterwards.
	ErrEffectApplied = errors.New("an effect is recorded under this key")
)

// CorruptRecordError reports a record that a store could not read while
// listing or sweeping: the record is skipped, reported and left in place. It
// wraps [ErrCorrupt].
type CorruptRecordError struct {
	Key string
	Err error
}

func (e *CorruptRecordError) Error() string {
	return fmt.Sprintf("record %s is unreadable and was skipped: %v", e.Key, e.Err)
}

func (e *CorruptRecordError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// CorruptKeys returns the keys of the records err reports as unreadable
// (see [CorruptRecordError]), in the order reported.
func CorruptKeys(err error) []string {
	var keys []string
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *CorruptRecordError:
			keys = append(keys, e.Key)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return keys
}
