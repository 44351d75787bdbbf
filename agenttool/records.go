package agenttool

import "github.com/retrysafe/retrysafe/agenttool/storekit"

// The store's vocabulary that users of agenttool meet: the Store given to
// Options, and the records an Operator lists and shows. Authors of a store
// find the rest in package storekit.
type (
	// Store keeps keys and outcomes durably: boltstore for one process,
	// pgstore for many replicas, memstore for tests. See storekit.Store.
	Store = storekit.Store
	// Record is what a store keeps for one action.
	Record = storekit.Record
	// State is the state of a record.
	State = storekit.State
	// Digest is a SHA-256 (or HMAC-SHA-256) digest.
	Digest = storekit.Digest
	// Resolution records who settled an unknown outcome, how and why.
	Resolution = storekit.Resolution
)

// The states of a record.
const (
	Pending   = storekit.Pending
	Succeeded = storekit.Succeeded
	Failed    = storekit.Failed
	Unknown   = storekit.Unknown
)
