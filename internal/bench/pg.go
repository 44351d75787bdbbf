package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
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
	// StoreAlone is the store's own Claim and Finish, with no tool
	// around them: its statements, decisions and group commit.
	StoreAlone float64
	// ClientCPU is this process's CPU time per call (µs) while guarded
	// calls, the store alone and the grouped pair on the store's table
	// ran: what each costs beside PostgreSQL on a machine they share.
	ClientCPU struct{ Guarded, StoreAlone, GroupedOnStoreTable float64 }
}

// shapedKey returns the i-th key of a baseline: a key of the shape
// agenttool gives an action (the tool's name, then 32 base32 letters of a
// digest), so that a baseline's rows land in the key's index where a
// call's do — spread, not appended at its end, which costs PostgreSQL a
// third more at 64 callers.
func shapedKey(i int64) string {
	sum := sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(i)))
	return "send_email/" + keyEncoding.EncodeToString(sum[:20])
}

var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

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
		key := shapedKey(seq.Add(1))
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
	outcome := []byte(`{"version":2,"status":"success","tool":"send_email","request_ref":"send_email/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","attempts":1,"result":{"message_id":"<1@mail.example>"},"next":"continue"}`)
	alone := func(g int) error {
		key, scope := shapedKey(seq.Add(1)), storekit.Digest{0x5e, byte(g), byte(g >> 8)}
		now := time.Now()
		res, err := store.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: storekit.Digest{1}, Session: scope,
			Fingerprint: storekit.Digest{2}, Owner: key, Now: now, Lease: time.Minute, FenceScope: scope})
		if err != nil || !res.Claimed {
			return fmt.Errorf("claim %s: %+v, %v", key, res, err)
		}
		return store.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: storekit.Succeeded,
			Attempts: 1, Outcome: outcome, Now: now, TTL: 24 * time.Hour})
	}
	// timed runs fn at c callers and adds its calls per second and this
	// process's CPU per call, a third each, to rate and cpu.
	timed := func(c, count int, fn func(int) error, rate, cpu *float64) error {
		before := processCPU()
		v, err := fanOut(c, count, fn)
		*rate += v / 3
		if cpu != nil {
			*cpu += float64((processCPU() - before).Microseconds()) / float64(count) / 3
		}
		return err
	}
	before := store.GroupCommitStats()
	for _, c := range callers {
		r := PGConcResult{Callers: c}
		// Three rounds in turn, so that drift in the disk's speed hits all
		// alike.
		for range 3 {
			count := max(3*c, n)
			cpu := &r.ClientCPU
			if err := timed(c, count, call, &r.Guarded, &cpu.Guarded); err != nil {
				return nil, err
			}
			if err := timed(c, count, func(int) error { return pairOn(store.Pool()) }, &r.Bare, nil); err != nil {
				return nil, err
			}
			if err := timed(c, count, func(int) error { return pairOn(wide) }, &r.BareWide, nil); err != nil {
				return nil, err
			}
			if err := timed(c, count, func(int) error { return grouped(shapedKey(seq.Add(1))) }, &r.Grouped, nil); err != nil {
				return nil, err
			}
			if err := timed(c, count, func(int) error { return groupedOnStore(shapedKey(seq.Add(1))) }, &r.GroupedOnStoreTable, &cpu.GroupedOnStoreTable); err != nil {
				return nil, err
			}
			if err := timed(c, count, alone, &r.StoreAlone, &cpu.StoreAlone); err != nil {
				return nil, err
			}
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
