// Package storekit is what a store for agenttool is made of: the [Store]
// interface, the records it keeps and the requests it answers, and the
// rules every store applies — [DecideClaim], [DecideFinish],
// [DecideRelease], [DecideRenew] — inside one transaction each, so that
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
// record it holds, in one transaction per call:
//
//	func (s *MyStore) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
//		// begin; read the record of req.Key (nil if none)
//		res, write, err := storekit.DecideClaim(existing, req, s.nextToken)
//		// if write: save res.Record; if res.Claimed && req.Fence != nil:
//		//   res.Fenced = whether another record of the scope holds the fence
//		// commit
//	}
//
// It indexes the records of a tool and principal that hold the unknown
// fence ([Record.Fences]), so that a claim answers the fence and a scoped
// [ListRequest] is answered without reading every record, and it reports
// records it cannot read ([CorruptRecordError]) instead of stopping. So
// that an application can move from one store to another ([Copy], the
// operator command retrysafe copy), it lists its records page by page
// ([Exporter]) and takes them in bulk ([Importer]).
package storekit
