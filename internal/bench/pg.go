package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
)

// PGResult compares pgstore with the bare statements it stands on.
type PGResult struct {
	Single            PairResult
	Guarded64, Bare64 float64
}

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
	bare := pgx.Identifier{schema, "bare"}.Sanitize()
	if _, err := store.Pool().Exec(ctx, `CREATE TABLE `+bare+` (key text PRIMARY KEY, tool text NOT NULL, state smallint NOT NULL,
		principal bytea NOT NULL, fingerprint bytea NOT NULL, owner text NOT NULL, token bigint NOT NULL, lease_expiry timestamptz,
		attempts integer NOT NULL, outcome bytea, created timestamptz NOT NULL, updated timestamptz NOT NULL, expires timestamptz)`); err != nil {
		return nil, err
	}
	tool := guard(store)
	var seq atomic.Int64
	digest := make([]byte, 32)
	pair := func() error {
		key := "send_email/" + strconv.FormatInt(seq.Add(1), 10) + "abcdefghijklmnopqrstuvwxyz"
		now := time.Now()
		var token int64
		if err := store.Pool().QueryRow(ctx, `INSERT INTO `+bare+` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated)
			VALUES ($1, 'send_email', 1, $2, $2, 'owner', $3, $4, 0, $5, $5) ON CONFLICT (key) DO NOTHING RETURNING token`,
			key, digest, seq.Load(), now.Add(time.Minute), now).Scan(&token); err != nil {
			return err
		}
		_, err := store.Pool().Exec(ctx, `UPDATE `+bare+` SET state = 2, owner = '', lease_expiry = NULL, attempts = 1, outcome = $3,
			updated = $4, expires = $5 WHERE key = $1 AND token = $2 AND state = 1`, key, token, recordSized, now, now.Add(24*time.Hour))
		return err
	}
	var perr error
	res := &PGResult{}
	res.Single = alternate(n, func() { mustSucceed(tool.Invoke(scope, input(seq.Add(1)))) }, func() {
		if err := pair(); err != nil {
			perr = err
		}
	})
	if perr != nil {
		return nil, perr
	}
	for range 3 {
		v, err := fanOut(64, n, func(int64) error { mustSucceed(tool.Invoke(scope, input(seq.Add(1)))); return nil })
		if err != nil {
			return nil, err
		}
		res.Guarded64 += v / 3
		if v, err = fanOut(64, n, func(int64) error { return pair() }); err != nil {
			return nil, err
		}
		res.Bare64 += v / 3
	}
	return res, nil
}
