package main

import (
	"fmt"
	"io"
	"time"

	bolt "go.etcd.io/bbolt"
)

// boltCommits is where a bbolt file's commit time goes, from bbolt's own
// statistics: with -boltstats, the soak benchmark prints one line of them
// per window, for the commits of that window.
type boltCommits struct {
	txid                      uint64 // committed write transactions so far
	fileFree, filePending     int    // pages on the freelist, and freed but still read
	freelistBytes             int    // the freelist, as a commit would write it
	spill, rebalance, write   time.Duration
	pages, splits, rebalances int64
	nodes                     int64
}

func readBoltCommits(db *bolt.DB) boltCommits {
	var c boltCommits
	_ = db.View(func(tx *bolt.Tx) error { c.txid = uint64(tx.ID()); return nil })
	st := db.Stats()
	c.fileFree, c.filePending, c.freelistBytes = st.FreePageN, st.PendingPageN, st.FreelistInuse
	t := st.TxStats
	c.spill, c.rebalance, c.write = t.GetSpillTime(), t.GetRebalanceTime(), t.GetWriteTime()
	c.pages, c.splits, c.rebalances, c.nodes = t.GetWrite(), t.GetSplit(), t.GetRebalance(), t.GetNodeCount()
	return c
}

// printBoltCommits prints the commits between a and b: how many, and per
// commit the pages written, nodes split and rebalanced, and the time spent
// spilling nodes to pages (with the page allocation from the freelist),
// rebalancing, and writing with its fsyncs; then the freelist.
func printBoltCommits(w io.Writer, a, b boltCommits) {
	n := float64(b.txid - a.txid)
	if n == 0 {
		return
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / n / 1000 }
	fmt.Fprintf(w, "  commits %d: per commit %.0f pages, %.1f splits, %.1f rebalances, spill %.2f ms, rebalance %.2f ms, write+fsync %.2f ms; freelist %d free + %d pending pages (%.0f KB)\n",
		b.txid-a.txid, float64(b.pages-a.pages)/n, float64(b.splits-a.splits)/n, float64(b.rebalances-a.rebalances)/n,
		per(b.spill-a.spill), per(b.rebalance-a.rebalance), per(b.write-a.write), b.fileFree, b.filePending, float64(b.freelistBytes)/1024)
}

// printBoltTrees prints the size of each of boltstore's buckets: pages (leaf and
// branch), depth and keys, generations summed, so that a window's pages
// per commit can be set beside the trees its writes land in.
func printBoltTrees(w io.Writer, db *bolt.DB) {
	_ = db.View(func(tx *bolt.Tx) error {
		fmt.Fprint(w, "  trees:")
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			st := b.Stats()
			fmt.Fprintf(w, " %s %d pages (depth %d, %d keys, %d buckets);", name, st.LeafPageN+st.BranchPageN, st.Depth, st.KeyN, st.BucketN-1)
			return nil
		})
	})
	fmt.Fprintln(w)
}
