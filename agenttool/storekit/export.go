package storekit

import "context"

// Exporter is implemented by stores that list every record they hold, page
// by page: to copy one store into another ([Copy]: boltstore's records into
// pgstore, when an application grows to several replicas), or to back one
// up. Every store of this module implements it.
type Exporter interface {
	// Export returns up to limit records (0 means [DefaultExportLimit])
	// whose keys come after after ("" for the first page), in the store's
	// order of keys, whatever their state, each whole: every field as Get
	// returns it. next is the after of the following page, or "" when no
	// page follows; it may be set when nothing follows, and the next page
	// is then empty.
	//
	// The order is the store's own: bytes for memstore and boltstore, the
	// database's collation for pgstore. Pages of one store follow each
	// other; exports of two stores need not be in the same order.
	//
	// Each page is read consistently (one transaction, or one statement),
	// but the pages are not one snapshot: a record written while an export
	// runs is listed if its key comes after the page being read.
	//
	// A record it cannot read counts towards the page, is skipped and
	// reported: the readable records come back, with next, and an error
	// that wraps [ErrCorrupt] and names the others ([CorruptKeys]).
	Export(ctx context.Context, after string, limit int) (recs []Record, next string, err error)
}

// DefaultExportLimit is the records a page of [Exporter.Export] holds at
// most when the call does not say.
const DefaultExportLimit = 100
