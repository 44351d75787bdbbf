// Package pgstore is the store for agenttool when many replicas share the work: keys and outcomes
// live in PostgreSQL, through
// github.com/jackc/pgx/v5.
//
// # Basics
//
//	store, err := pgstore.Open(ctx, &pgstore.Options{URL: "postgres://app@db/app"})
//	if err != nil { ... }
//	defer store.Close()
//
// With a nil *Options or an empty URL, the DATABASE_URL environment variable
// names the database. Open creates or migrates its schema ("retrysafe" by
// default) when it needs it: versioned, idempotent, and safe when several
// replicas open at once (the migration holds a transaction-scoped advisory
// lock); a current schema is only read. [Migrate] is the migration alone,
// for a role that may change the schema, so that the application can run
// under one with rights on the tables alone; Options.NoMigrate makes Open
// refuse, and leave as it is, a schema that is missing, older or newer;
// Options.ReadOnly opens a store that refuses writes. docs/stores.md lists
// the grants each role needs.
//
// A new claim is one INSERT … ON CONFLICT DO NOTHING, and it answers the
// unknown fence in the same statement: the unique partial index
// records_slot, on (tool, fence_scope) over the records that hold their
// scope's slot (pending, unknown, or succeeded with a notice), refuses the
// row when another action of the tool and scope holds the slot, on every
// replica alike. When there is nothing to fence the fence costs one entry
// in that index and nothing else: no read of other records, no second
// statement, no lock beyond the row's. Measured side by side with the bare
// INSERT of the same columns into a table with the key alone
// (BenchmarkPG/single, claim/insert), a lone claim cost 1.00–1.06× (three
// runs; 1.00–1.15× in others on the same, busy, machine). The alternative,
// a summary row per scope that the claim reads and updates in the same
// statement, would write a second row with every claim and make each
// busy scope one hot row, for what the index gives for one entry; the
// index was kept. A claim fenced by session also looks, in the same
// statement, for an open record of its tool and session claimed under
// another fence setting (FenceOff, a principal's fence, or a version
// before slots), which holds it back as the slot's holder would; a claim
// fenced by principal, for one of its tool and principal that holds no
// slot (FenceOff, a version before slots, or an action settled aside) or
// is closed as replaced and keeps a mark:
// the partial index records_beside (tool, principal, session, key) holds
// only those records, so for tools of the default fence the look is one
// probe of an empty index and no write. A claim the INSERT did not make (its key exists, its slot is
// held, or a record is beside it: the statement cannot tell which) reads
// the key's record,
// answers from it when nothing must change (a replay, a live lease), and
// otherwise decides in a transaction that locks the key's row and the
// slot's holder, or the record beside the slot (FOR UPDATE). Recording the outcome is one UPDATE fenced
// by the claim's token. Replays read without writing.
//
// What awaits reconciliation is found through records_open, an index of
// the open records alone: every pending record, and every unknown one not
// approved for another attempt. Listing, counting and the sweeper's
// takeover read it, however many settled records the table holds. The
// fence's two indexes hold every open record too, but also each succeeded
// record that was given a notice, for as long as the record lives (an
// index cannot know when a notice ends): read through them, as from
// migration 5 to 6, a takeover of four unknown records read thousands of
// notices, and took half of the server's time by a soak's third minute.
// A listing of one principal's open records (of one tool, or of all: the
// operator's view of one user) reads them by records_open_scope
// (principal, key) instead: it reads that principal's open records, and
// no other tenant's. Besides its key the table has five indexes:
// records_slot, records_beside, records_open, records_open_scope, and
// records_expires for the sweep (expires is when a record may go:
// storekit.Record.SweepAt, the later of its lifetime and its notice or
// mark; its lifetime alone is the column lifetime).
//
// The planner needs to know the table's size for these reads to stop at
// their page: autovacuum analyses the table as it grows, and Import
// analyses it at once when it grew it by a tenth or more (ANALYZE needs
// the table's owner; another role is warned, and the import stands).
// The table is never planned for as a page or none (migration 16):
// autovacuum first analyses a new table once a thousand rows changed, and
// vacuum keeps the pages of a table the sweep emptied. Planned for one
// page, the table was cheaper to read whole than by its key, and each
// connection kept such plans of its lone statements — the insert, the
// outcome, the read of one key — until the table was next analysed. An
// operator's ANALYZE of a table that small opens that window again, until
// autovacuum next analyses it.
// After a restore or pg_upgrade, analyse the database before serving
// (vacuumdb --analyze-in-stages), or the first listings read every open
// record.
//
// A connection keeps the plan of each statement it prepares. The
// statements that read the table by anything but one key — a batch's
// outcomes, the open records' reads, the sweep — are planned when they
// run instead, for the table as it is then: a plan made while the table
// was new read it whole, and a connection that kept it read every row at
// each batch until the server first analysed the table. The store works in
// each of pgx's query modes (default_query_exec_mode in the URL, or the
// mode of the pool given), the simple protocol included; with the default
// mode and no cache of descriptions (description_cache_capacity=0), those
// statements are described at each run.
//
// # Group commit
//
// Claims of new keys and, apart, outcomes from one process share round
// trips and commits. A write that arrives while no write of its kind is
// running runs at once, alone, on its caller's context: a lone caller
// never waits for company and pays exactly the statement above. Writes
// that arrive while one runs queue; when it ends, the queue is written as
// one statement — a multi-row INSERT … SELECT FROM unnest(…) ON CONFLICT
// DO NOTHING RETURNING key, token for claims, a multi-row UPDATE … FROM
// unnest(…) RETURNING key for outcomes — in one round trip and one commit,
// and so on while writes keep coming. There is no timer: the window is
// the time the previous write took. Each caller gets its own answer: its
// token; or, for a claim the statement did not return, the locked path
// above, alone; or ErrFenced for an outcome whose token no longer holds
// its record. Two writes of one key never share a batch, and a batch's
// rows are written in key order, so that two processes' batches lock the
// keys they share in one order. With 64 concurrent callers a commit
// carried 13–47 claims or outcomes, and a guarded call got 2.4–5.2× the
// throughput of the bare INSERT and UPDATE pair on the same pool, about
// half that of the same pair group-committed by hand
// (docs/performance.md, "Under load"). A pipelined pgx.Batch of the single statements
// in one implicit transaction measured the same within the noise
// (BenchmarkGroupCommit); the multi-row statements, one statement for the
// server to run instead of one per row, were kept. Two batches of a kind
// in flight at once, or four, measured no better than one.
//
// When a batch goes wrong, what may run twice: a batch the database
// refused as a whole (an ERROR — a row it cannot store, a statement
// timeout, a deadlock with another process's batch — rolls the statement
// back) runs again, each write alone, so that one bad row fails only its
// own caller. A batch whose fate is unknown (the connection lost, the
// backend terminated, the reply never read: it may have committed) is
// looked up: a claim whose record is there, pending under its own lease
// owner, gets its token; an outcome whose record holds its state under its
// token is recorded; every other write runs again alone, which answers
// truly whatever the batch did. If the lookup fails too, every caller in
// the batch gets the batch's error and a guarded tool does not run (fail
// closed); a claim that did commit then keeps its key until its lease
// lapses, as a lone claim whose reply was lost does. A caller whose
// context ends while its write waits or runs returns at once; the batch
// goes on for the others, on a context that ends when all of its callers
// have gone or at the latest of their deadlines, and a claim it granted
// to a caller that left is released. [Store.GroupCommitStats] counts what
// was shared.
//
// The sweeper takes unknown records with FOR UPDATE SKIP LOCKED, so
// replicas share the work without waiting on each other.
//
// # High availability
//
// A failover to a standby that had not received the primary's last
// commits loses them. Every write of the store commits as
// synchronous_commit = on at least, set in its own statement. A claim of
// an at-most-once or reconcilable tool (storekit.ClaimRequest.Unkeyed) is
// made only where it is durable where a failover can go — the primary
// waits for a synchronous standby, or no standby is in sight of the role
// — and refused otherwise (storekit.ErrNotDurable), unless
// Options.AcceptAsyncStandbys accepts the risk; one whose commit meets the
// warning of a cancelled synchronous wait, or that is no longer durable
// once committed (synchronous replication turned off meanwhile), is given
// back and refused ([ConfigurePool] for a pool of your own). The store records the
// server's timeline: every claim checks it in its own statement, the
// first on a new one records it and moves the token sequence past every
// token the old primary could have handed out, and for
// Options.FailoverWindow a claim that finds no record (or one a lost claim
// may have moved on from) is decided as a record the store may have lost
// (storekit.DecideLost).
// [Store.Replication] and `retrysafe doctor` say what the store sees;
// docs/stores.md, "High availability", what each setup guarantees.
//
// # Caveats
//
//   - Every method honours its context: a cancelled context cancels the
//     query, or, for a claim or an outcome in a shared batch, the
//     caller's wait for it (the batch goes on for the others). Outcomes
//     are recorded by agenttool on a context that outlives the caller's,
//     bounded by Options.StoreTimeout of the tool.
//   - One clock per comparison: every time in a row (lease expiry, created,
//     updated, expires) is written by a caller, from its own clock, and
//     compared with a caller's clock; the database's now() is never used.
//     Keep replicas' clocks in sync (NTP) and set agenttool's ClockSkew to
//     how far apart they may be: a skew shortens or lengthens leases by that
//     much, and a takeover waits it out before trusting "not applied".
//   - PostgreSQL keeps microseconds: lease ends are rounded up to the next
//     microsecond when written, so that a lease may end up to a
//     microsecond late here, never early.
//   - If the database is unreachable, every method fails and guarded tools
//     answer store_unavailable without running (fail closed).
package pgstore
