// Package pgstore is the store for agenttool when many replicas share the work: keys and outcomes
// live in PostgreSQL (or a database that speaks its protocol), through
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
// A new claim is one INSERT … ON CONFLICT DO NOTHING, which in the same
// statement answers the unknown fence (is another record of the tool and
// scope awaiting reconciliation?) from the records_scope index; recording
// the outcome is one UPDATE fenced by the claim's token. Replays read
// without writing.
// The sweeper takes unknown records with FOR UPDATE SKIP LOCKED, so
// replicas share the work without waiting on each other.
//
// # Caveats
//
//   - Every method honours its context: a cancelled context cancels the
//     query. Outcomes are recorded by agenttool on a context that outlives
//     the caller's, bounded by Options.StoreTimeout of the tool.
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
