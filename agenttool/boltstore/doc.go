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
// fsyncs.
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
