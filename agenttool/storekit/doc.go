// Package storekit is what a store for agenttool is made of: the [Store]
// interface, the records it keeps and the requests it answers, and the
// rules every store applies — [DecideClaim], [DecideFinish],
// [DecideRelease], [DecideRenew], [DecideMark] — inside one transaction each, so that
// every store follows the same state machine. agenttool/storetest is the
// conformance suite a store passes.
//
// Users of agenttool need none of this: they pass a store (boltstore,
// pgstore, memstore) to agenttool.Options and read records through an
// agenttool.Operator, whose types agenttool names too (agenttool.Record,
// agenttool.Store). Authors of a store need all of it.
//
// # Writing a store
//
// A store keeps one record per key and applies the Decide functions to the
// records it holds, in one transaction per call:
//
//	func (s *MyStore) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
//		// begin; read the record of req.Key (nil if none); the record of
//		// another key that holds the slot of req.Slot() if req.FenceScope is
//		// set, and if req.GathersBeside() the records beside it
//		d, err := storekit.DecideClaim(existing, occupants, req, s.nextToken)
//		// save each of d.Occupants; if d.Write: save d.Result.Record;
//		// keep the slot index: a record that HoldsSlot is its slot's one holder
//		// commit
//	}
//
// The slot is the unknown fence, decided in the store: at most one record
// of a tool and fence scope holds it ([Record.HoldsSlot]), so that one
// write of a tool runs at a time in a scope and none while an earlier one
// is unknown — on every replica alike, and across a restart. A store that
// many processes share must make two concurrent claims of one slot unable
// to both succeed (pgstore does it with a unique partial index; a
// transaction that reads the slot and writes it is enough where
// transactions are serial, as in bbolt).
//
// It indexes the open records of a tool and principal, so that a scoped
// [ListRequest] is answered without reading every record, and it reports
// records it cannot read ([CorruptRecordError]) instead of stopping. So
// that an application can move from one store to another ([Copy], the
// operator command retrysafe copy), it lists its records page by page
// ([Exporter]) and takes them in bulk ([Importer]).
//
// A store keeps every field of a [Record] as it was written: the Decide
// functions read them all (a mark's NoticeUntil and StandsFor among
// them), and a field a store drops changes what its records decide.
//
// A record's Owner is an opaque string unique to the claim that holds it,
// for logs and operators; nothing is read from it.
package storekit
