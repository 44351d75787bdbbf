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
	// ErrNotDurable: the store refused an Unkeyed claim that it could not
	// make durable where a failover can go (pgstore: a primary that streams
	// to a standby asynchronously, or a commit whose wait for its
	// synchronous standby was cancelled). The tool must not act: a failover
	// could lose the claim, and a retry would then run the action again.
	ErrNotDurable = errors.New("the claim would not survive a failover")
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

// SlotHeldError is the error of an import ([Importer]) one of whose records
// would hold a slot of the fence ([Record.HoldsSlot]) that another record
// holds: one of the import's own, or one the store holds. A slot has one
// holder, or the fence could lose sight of an action whose outcome is
// unknown. Nothing of the import is written. It wraps [ErrInvalidRequest].
// [Copy] answers it by copying the record beside the slot instead
// ([CopyMovedBeside]).
type SlotHeldError struct {
	Key    string // the record that would hold the slot
	Tool   string // the slot's tool
	Holder string // the record that holds it; "" when the store cannot say which
	// Key and Tool are "" when the store cannot say which of the import's
	// records it is (a claim took the slot while the import was written).
}

func (e *SlotHeldError) Error() string {
	or := func(s, otherwise string) string {
		if s == "" {
			return otherwise
		}
		return s
	}
	return fmt.Sprintf("importing %s: it would hold the fence's slot of %s in its scope, which %s holds: a slot has one holder",
		or(e.Key, "a record"), or(e.Tool, "its tool"), or(e.Holder, "another record"))
}

func (e *SlotHeldError) Unwrap() error { return ErrInvalidRequest }

// CheckImportSlots returns a [*SlotHeldError] for the first of recs that
// would hold a slot that an earlier one of recs holds, or that holder
// names a record of the store for (the key of the slot's holder, "" for a
// free slot). Stores call it before they write an import.
func CheckImportSlots(recs []Record, holder func(Slot) (string, error)) error {
	taken := make(map[Slot]string)
	for i := range recs {
		r := &recs[i]
		if !r.HoldsSlot() {
			continue
		}
		sl := r.Slot()
		if k, ok := taken[sl]; ok {
			return &SlotHeldError{Key: r.Key, Tool: r.Tool, Holder: k}
		}
		k, err := holder(sl)
		if err != nil {
			return err
		}
		if k != "" && k != r.Key {
			return &SlotHeldError{Key: r.Key, Tool: r.Tool, Holder: k}
		}
		taken[sl] = r.Key
	}
	return nil
}
