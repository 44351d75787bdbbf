package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// PGResult compares pgstore with the bare statements it stands on: a lone
// call against the bare pair (INSERT … ON CONFLICT DO NOTHING, then a
// fenced UPDATE, on a table of the same columns with no index beyond the
// key), and calls per second at each concurrency.
type PGResult struct {
	Single      PairResult
	Concurrency []PGConcResult
	// PoolConns is the connections of the pool the store and the bare pair
	// share (pgxpool's default); WidePoolConns those of the pool of the
	// bare pair's second measure.
	PoolConns, WidePoolConns int
	// ClaimsPerBatch and OutcomesPerBatch are the mean size of the store's shared batches of claims
	// and of outcomes (group commit) over the concurrent rounds.
	ClaimsPerBatch, OutcomesPerBatch float64
}

// PGConcResult is calls per second at one concurrency: guarded calls, the
// bare pair on the same pool, the bare pair on a pool of up to wideConns
// connections, one per caller (information: what the pair gets from
// PostgreSQL's own sharing of WAL flushes when callers have connections
// of their own), and the bare pair group-committed by hand on the
// store's pool (groupedPair: the floor a group commit stands on).
type PGConcResult struct {
	Callers                          int
	Guarded, Bare, BareWide, Grouped float64
	// GroupedOnStoreTable is the grouped pair on a copy of the store's
	// table, with its indexes.
	GroupedOnStoreTable float64
}

// wideConns is the size of the bare pair's wide pool: within PostgreSQL's
// default max_connections (100), with the store's pool beside it.
const wideConns = 64

func measurePG(ctx context.Context, url string, n int) (*PGResult, error) {
	b := make([]byte, 6)
	rand.Read(b)
	schema := "bench_" + hex.EncodeToString(b)
	store, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	defer store.Pool().Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	wideCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	wideCfg.MaxConns = wideConns
	wide, err := pgxpool.NewWithConfig(ctx, wideCfg)
	if err != nil {
		return nil, err
	}
	defer wide.Close()
	bare := pgx.Identifier{schema, "bare"}.Sanitize()
	if _, err := store.Pool().Exec(ctx, `CREATE TABLE `+bare+` (key text PRIMARY KEY, tool text NOT NULL, state smallint NOT NULL,
		principal bytea NOT NULL, fingerprint bytea NOT NULL, owner text NOT NULL, token bigint NOT NULL, lease_expiry timestamptz,
		attempts integer NOT NULL, outcome bytea, created timestamptz NOT NULL, updated timestamptz NOT NULL, expires timestamptz)`); err != nil {
		return nil, err
	}
	tokens := pgx.Identifier{schema, "bare_tokens"}.Sanitize()
	if _, err := store.Pool().Exec(ctx, `CREATE SEQUENCE `+tokens); err != nil {
		return nil, err
	}
	gctx, stopGrouped := context.WithCancel(ctx)
	defer stopGrouped()
	grouped := groupedPair(gctx, store.Pool(), bare, tokens, false)
	// The same floor on a copy of the store's own table, its indexes and
	// all: what of the gap the indexes' upkeep is.
	onStore := pgx.Identifier{schema, "bare_as_store"}.Sanitize()
	if _, err := store.Pool().Exec(ctx, `CREATE TABLE `+onStore+` (LIKE `+pgx.Identifier{schema, "records"}.Sanitize()+` INCLUDING ALL)`); err != nil {
		return nil, err
	}
	groupedOnStore := groupedPair(gctx, store.Pool(), onStore, tokens, true)
	tool := guard(store)
	var seq atomic.Int64
	digest := make([]byte, 32)
	pairOn := func(pool *pgxpool.Pool) error {
		key := "send_email/" + strconv.FormatInt(seq.Add(1), 10) + "abcdefghijklmnopqrstuvwxyz"
		now := time.Now()
		var token int64
		if err := pool.QueryRow(ctx, `INSERT INTO `+bare+` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated)
			VALUES ($1, 'send_email', 1, $2, $2, 'owner', $3, $4, 0, $5, $5) ON CONFLICT (key) DO NOTHING RETURNING token`,
			key, digest, seq.Load(), now.Add(time.Minute), now).Scan(&token); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `UPDATE `+bare+` SET state = 2, owner = '', lease_expiry = NULL, attempts = 1, outcome = $3,
			updated = $4, expires = $5 WHERE key = $1 AND token = $2 AND state = 1`, key, token, recordSized, now, now.Add(24*time.Hour))
		return err
	}
	var perr error
	res := &PGResult{PoolConns: int(store.Pool().Config().MaxConns), WidePoolConns: int(wideCfg.MaxConns)}
	res.Single = alternate(n, func() { mustSucceed(tool.Invoke(scope, input(seq.Add(1)))) }, func() {
		if err := pairOn(store.Pool()); err != nil {
			perr = err
		}
	})
	if perr != nil {
		return nil, perr
	}
	call := func(g int) error {
		if env := tool.Invoke(callerScopes[g], input(seq.Add(1))); env.Status != envelope.Success {
			return fmt.Errorf("%s", env)
		}
		return nil
	}
	before := store.GroupCommitStats()
	for _, c := range callers {
		r := PGConcResult{Callers: c}
		// Three rounds in turn, so that drift in the disk's speed hits all
		// alike.
		for range 3 {
			count := max(3*c, n)
			v, err := fanOut(c, count, call)
			if err != nil {
				return nil, err
			}
			r.Guarded += v / 3
			if v, err = fanOut(c, count, func(int) error { return pairOn(store.Pool()) }); err != nil {
				return nil, err
			}
			r.Bare += v / 3
			if v, err = fanOut(c, count, func(int) error { return pairOn(wide) }); err != nil {
				return nil, err
			}
			r.BareWide += v / 3
			if v, err = fanOut(c, count, func(int) error {
				return grouped("send_email/g" + strconv.FormatInt(seq.Add(1), 10) + "abcdefghijklmnopqrstuvwxyz")
			}); err != nil {
				return nil, err
			}
			r.Grouped += v / 3
			if v, err = fanOut(c, count, func(int) error {
				return groupedOnStore("send_email/s" + strconv.FormatInt(seq.Add(1), 10) + "abcdefghijklmnopqrstuvwxyz")
			}); err != nil {
				return nil, err
			}
			r.GroupedOnStoreTable += v / 3
		}
		res.Concurrency = append(res.Concurrency, r)
	}
	after := store.GroupCommitStats()
	if b := after.ClaimBatches - before.ClaimBatches; b > 0 {
		res.ClaimsPerBatch = float64(after.Claims-before.Claims) / float64(b)
	}
	if b := after.OutcomeBatches - before.OutcomeBatches; b > 0 {
		res.OutcomesPerBatch = float64(after.Outcomes-before.Outcomes) / float64(b)
	}
	return res, nil
}
