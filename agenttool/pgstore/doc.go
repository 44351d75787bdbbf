// Package pgstore is the agenttool.Store for many replicas: keys and outcomes
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
// names the database. Open creates and migrates its schema ("retrysafe" by
// default): versioned, idempotent, and safe when several replicas open at
// once (the migration holds a transaction-scoped advisory lock).
//
// A new claim is one INSERT … ON CONFLICT DO NOTHING; recording the outcome
// is one UPDATE fenced by the claim's token. Replays read without writing.
// The sweeper takes unknown records with FOR UPDATE SKIP LOCKED, so
// replicas share the work without waiting on each other.
//
// # Caveats
//
//   - Every method honours its context: a cancelled context cancels the
//     query. Outcomes are recorded by agenttool on a context that outlives
//     the caller's, bounded by Options.StoreTimeout of the tool.
//   - Leases and expiries compare the callers' clocks, written into the
//     rows: keep replicas' clocks in sync (NTP); a skew shortens or lengthens
//     leases by that much.
//   - If the database is unreachable, every method fails and guarded tools
//     answer store_unavailable without running (fail closed).
package pgstore
