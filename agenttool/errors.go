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
	// ErrAwaitsInput marks a tool's definite error that says the
	// destination did nothing and waits for the user's answer (an MCP
	// server's request for input, SEP-2322) before it acts. Wrap it in the
	// error given to envelope.MarkDefinite with the code to answer:
	// the key is given back at once — nothing is recorded and nothing
	// retried, so that the call that carries the answer, with the same
	// input, meets the same key as a new attempt of the same action — and
	// the call answers definite_failure with that code, next ask_human.
	// After an attempt that may have applied the action, it proves
	// nothing of that one: the outcome stays unknown.
	ErrAwaitsInput = errors.New("the destination asks for input before it acts")
)

// CorruptKeys returns the keys of the records err reports as unreadable
// (see storekit.CorruptRecordError), in the order reported: what an
// Operator's listing skipped.
func CorruptKeys(err error) []string { return storekit.CorruptKeys(err) }
