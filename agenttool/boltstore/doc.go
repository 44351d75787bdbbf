// Package boltstore is the embedded, durable store for agenttool: one bbolt file,
// one process.
//
// # Basics
//
// Open a file once per process and give the store to every guarded tool:
//
//	store, err := boltstore.Open("retrysafe.db", nil)
//	if err != nil { ... }
//	defer store.Close()
//	send, err := agenttool.Wrap(sendEmail, agenttool.Options{Store: store, Class: agenttool.Reconcilable, IdentifyingFields: []string{"to", "subject"}})
//
// Every state change is durable (committed and fsynced) before the call
// proceeds: the claim before the tool runs, the outcome before the envelope
// is returned. Replays and waits read without writing. Writes are
// group-committed: a write that finds no commit running commits alone at
// once, and writes that arrive while one runs share the next transaction,
// with no timer, so a lone caller pays no batch delay and many callers share
// fsyncs. A process that serves its calls over the network needs two Ps
// (GOMAXPROCS ≥ 2) for that, also on one CPU: with one, the calls that
// arrive while a commit waits for the disk are not read until it ends, so
// none queues to share the next commit, and each commits alone (the guard
// measured half the calls a second; mcpguard.TuneRuntime sets two).
//
// # Commits
//
// A commit writes every page it changed to a free place in the file (bbolt
// never overwrites a page the committed tree still uses), fsyncs them, then
// writes and fsyncs the meta page that makes them current. What it costs is
// mostly how many pages it writes, each in its own place: on the
// development machine, an fsync of 400 scattered 4 KB pages took 4.5 to 9
// times as long as one of 400 adjacent pages. So the file is laid out for
// a busy service's commits to write no more pages a call once records
// expire as fast as they are made, however long it runs:
//
//   - Pending records, and the fence slots they hold, live in buckets of
//     their own, small however large the file: a claim and its outcome
//     change pages that a commit's calls share.
//   - A settled record that nothing but its lifetime keeps (succeeded or
//     failed, with no notice, fence slot or committed effect) lives in a
//     generation: a bucket of the records whose lifetimes end in the same
//     window of time, a power of two seconds no longer than an eighth of
//     the lifetime. Once the window has passed, every record in it has
//     expired, and the sweeper drops the generation whole — bbolt frees its
//     pages without writing them — instead of deleting its records one by
//     one, each rewriting a leaf page; a generation of more than 8,192
//     records is first cut down in key order, 1,024 records a step, so
//     that no call waits behind one commit freeing tens of thousands of
//     pages. A settled record thus stays in the
//     file up to an eighth of its lifetime after it expires; a claim treats
//     it as absent from its expiry on.
//   - Everything else — unknown outcomes, records holding a fence slot or a
//     notice, records of files written before version 7 of the layout —
//     lives in the records bucket and is swept one by one, oldest expiry
//     first. A record is in one place only; a write that changes where it
//     belongs moves it, and a lookup tries each place.
//
// A claim of a new key must learn that no generation holds it, and with a
// sweeper a store holds eight to seventeen generations per lifetime in use,
// each a tree of tens of thousands of records in a busy one. So each
// generation has a filter of its keys in memory (a Bloom filter): it tells
// a lookup that the generation does not hold a key for about 99 keys in 100
// it lacks, at the cost of one cache line, and never for a key it holds; a
// lookup walks a generation's tree only when its filter says it may hold
// the key. Among 16 generations of 4,000 records, a lookup of a new key took
// 2.2 µs instead of 11.6 walking every tree on the development machine
// (BenchmarkLookupOfANewKeyAmongGenerations). The filters are derived from
// the file, as the freelist is (below): Open builds them from the keys in
// the generations, and every write that puts a key in a generation adds it
// inside its transaction, before it commits. Nothing is taken out of a
// filter: a key deleted, or put by a write that rolled back, costs a walk,
// not an answer. A crash loses nothing the next Open does not build again.
// Building them reads every key in the generations: 79 ms of an Open of a
// file of a million records, which took 638 ms in all
// (BenchmarkOpenBuildsTheFilters).
//
// go run ./internal/bench -soak -boltstats prints pages and commit times per
// ten seconds.
//
// Two of bbolt's options differ from its defaults, so that a commit does
// not also cost more as free space accumulates in the file (after a burst
// of records has expired, say):
//
//   - The freelist is a hash map of free spans (bbolt's FreelistMapType),
//     not a sorted array: allocating a page does not scan every free page.
//   - The freelist is not written with each commit (NoFreelistSync): a
//     commit writes only the pages it changed. With 57,690 free pages in a
//     265 MB file, a commit of one write took 970 µs instead of 1,767 µs
//     on the development machine (go run ./internal/bench -freelist).
//
// Crash safety is bbolt's own and does not depend on the freelist: a
// commit becomes durable when its meta page is written, after its data
// pages have been fsynced; a crash before that leaves the previous meta
// page, whose tree no commit has overwritten. The freelist is derived from
// the tree — every page the committed root does not reach is free — so
// Open rebuilds it by walking the tree, including after a crash, where the
// pages the interrupted commit wrote are simply free again (a test kills a
// process that is calling and sweeping, and checks the reopened file with
// bbolt's consistency check). The price is at Open: the walk reads every
// page the tree uses, so Open takes time in proportion to the live
// records — 95 ms for 30,000 on the development machine, where the same
// file with a written freelist opened in 8 ms. Files written with either
// setting open with the other.
//
// # The file over days
//
// bbolt never gives space back to the file system: the file grows to hold
// the most records it has held at once, and then keeps its size, reusing
// its free pages. A store holds the records of one key lifetime (KeyTTL, a
// day by default) and up to an eighth more, and the unknown records
// awaiting settlement; the sweeper deletes the others as they expire, a
// generation at a time (see agenttool.Operator.RunSweeper).
// So over days the file's size follows the busiest key lifetime it has
// seen — about 700 bytes of file a record in the soak benchmark, where two
// minutes of records made at up to 4,400 calls/s took 225 MB and the file
// then kept that size — and a quieter day reuses the space of a busier
// one. Without a sweeper, generations still go once 64 are in the file:
// a write that starts a new one first drops those that have ended (by the
// write's time and by the machine's clock, whichever is earlier; an import
// drops none), so that lookups stay quick; every other expired record
// stays, and the file grows without bound.
//
// The process's memory follows the file too: bbolt's freelist keeps, for
// each page in use that it handed out from free space, the transaction
// that took it — about 30 bytes of heap for each 4 KB page in the soak
// benchmark, under 1% of the file (some 75 MB for a 10 GB file) — and the
// generations' filters take 1.3 to 1.9 bytes a record they hold (0.8 to
// 1.4 MB at the end of a soak; a filter sized at Open takes 1.3, one grown
// with its generation up to twice that). Both grow while the file does
// and stop with it; the rest of retrysafe's heap stays flat.
//
// To give space back (after a burst, or when KeyTTL was shortened),
// compact the file while no process has it open: bbolt's command line
// copies the live pages into a new, dense file, keeping the bucket
// sequences that fencing tokens come from:
//
//	go run go.etcd.io/bbolt/cmd/bbolt@v1.5.0 compact -o retrysafe.compact.db retrysafe.db
//	mv retrysafe.compact.db retrysafe.db
//
// Stop the application first (bbolt locks the file; a copy made while it
// writes would miss its last commits). The pages of a compacted file are
// full, so the first writes after it split many of them; the file settles
// back to its steady size as records come and go.
//
// # Caveats
//
//   - A pending record found at Open was left by a process that is gone;
//     its lease is ended at Open, so a takeover does not wait out the
//     lease, but still waits out a request the dead process may have had
//     in flight (the tool's AttemptTimeout plus ClockSkew) before it
//     trusts "not applied" — unless the answer comes from
//     [Store.Reconciler], which is exact.
//   - bbolt locks its file to one process. A second process that opens the
//     same file waits Options.LockTimeout and then fails with a clear error.
//     Several replicas must share pgstore instead.
//   - bbolt transactions cannot be cancelled: the context is checked before
//     each transaction, not during it.
//   - The crash windows: a process that dies after the tool's effect but
//     before the outcome is written leaves a pending record. Open ends the
//     leases of every pending record it finds (the file lock proves their
//     holders are gone), so the next call treats the action as unknown at
//     once (reconcile, or retry with the same key for keyed tools), never as
//     free. A process that dies after the outcome is written but before the
//     reply replays the outcome on the next call. Close the store only when
//     no call is in flight.
//   - A local effect can close the middle window entirely: [Store.Effect]
//     commits it in the same transaction that records it under the key, and
//     [Store.Reconciler] then answers exactly.
//   - Records hold digests of the principal and input and the encoded
//     outcome, never the input itself. Outcomes pass through the tool's
//     Codec, which can redact or encrypt them.
//   - Records are stored in a compact binary format. Files written by
//     earlier versions, whose records are JSON, are read as they are; each
//     record is rewritten in the binary format when it next changes. A
//     record in neither format fails closed (storekit.ErrCorrupt).
package boltstore
