package pgstore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// BenchmarkPG compares, in one run and on one server, a guarded call on
// pgstore with the bare pair of statements it stands on: INSERT … ON
// CONFLICT DO NOTHING (the claim) and a fenced UPDATE (the outcome); alone
// and with 64 concurrent callers.
//
//	DATABASE_URL=… go test -run '^$' -bench BenchmarkPG ./agenttool/pgstore/
func BenchmarkPG(b *testing.B) {
	store := pgtest.Open(b)
	ctx := context.Background()
	bare := pgx.Identifier{store.Schema(), "bare"}.Sanitize()
	// The bare table holds what a call must write: the same columns and
	// widths as the store's records, with no index beyond the key.
	if _, err := store.Pool().Exec(ctx, `CREATE TABLE `+bare+` (key text PRIMARY KEY, tool text NOT NULL, state smallint NOT NULL,
		principal bytea NOT NULL, fingerprint bytea NOT NULL, owner text NOT NULL, token bigint NOT NULL, lease_expiry timestamptz,
		attempts integer NOT NULL, outcome bytea, created timestamptz NOT NULL, updated timestamptz NOT NULL, expires timestamptz)`); err != nil {
		b.Fatal(err)
	}
	tool, err := agenttool.New("send_email", "Send an email.", func(ctx context.Context, in struct {
		To string `json:"to"`
	}) (string, error) {
		return "sent", nil
	}, agenttool.Options{Store: store, Class: agenttool.Keyed})
	if err != nil {
		b.Fatal(err)
	}
	scope := agenttool.WithScope(ctx, "tenant-1", "bench")
	var seq atomic.Int64
	call := func(b *testing.B) {
		in := `{"to":"user` + strconv.FormatInt(seq.Add(1), 10) + `@example.com"}`
		if env := tool.Invoke(scope, in); env.Status != envelope.Success {
			b.Fatal(env)
		}
	}
	outcome := []byte(`{"version":1,"status":"success","tool":"send_email","attempts":1,"result":"sent","next":"continue"}`)
	digest := make([]byte, 32)
	pair := func(b *testing.B) {
		key := "send_email/" + strconv.FormatInt(seq.Add(1), 10) + "abcdefghijklmnopqrstuvwxyz"
		now := time.Now()
		var token int64
		if err := store.Pool().QueryRow(ctx, `INSERT INTO `+bare+` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated)
			VALUES ($1, 'send_email', 1, $2, $2, '2b7c4f5e-8a4d-4f7e-9d6c-1f2e3d4c5b6a', $3, $4, 0, $5, $5)
			ON CONFLICT (key) DO NOTHING RETURNING token`, key, digest, seq.Load(), now.Add(time.Minute), now).Scan(&token); err != nil {
			b.Fatal(err)
		}
		if _, err := store.Pool().Exec(ctx, `UPDATE `+bare+` SET state = 2, owner = '', lease_expiry = NULL, attempts = 1, outcome = $3,
			updated = $4, expires = $5 WHERE key = $1 AND token = $2 AND state = 1`, key, token, outcome, now, now.Add(24*time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	// The store's own two statements, without the guarded tool around them.
	storeOps := func(b *testing.B) {
		key := "send_email/" + strconv.FormatInt(seq.Add(1), 10) + "abcdefghijklmnopqrstuvwxyz"
		now := time.Now()
		res, err := store.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send_email", Owner: "2b7c4f5e-8a4d-4f7e-9d6c-1f2e3d4c5b6a", Now: now, Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: agenttool.Succeeded,
			Attempts: 1, Outcome: outcome, Now: now, TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	// Disk latency drifts over seconds, so the three are measured in
	// alternation and reported side by side with their ratio.
	b.Run("single", func(b *testing.B) {
		var callT, storeT, pairT time.Duration
		for b.Loop() {
			t0 := time.Now()
			call(b)
			t1 := time.Now()
			storeOps(b)
			t2 := time.Now()
			pair(b)
			callT += t1.Sub(t0)
			storeT += t2.Sub(t1)
			pairT += time.Since(t2)
		}
		b.ReportMetric(float64(callT.Nanoseconds())/float64(b.N), "call-ns")
		b.ReportMetric(float64(storeT.Nanoseconds())/float64(b.N), "store-ns")
		b.ReportMetric(float64(pairT.Nanoseconds())/float64(b.N), "bare-pair-ns")
		b.ReportMetric(float64(callT)/float64(pairT), "call/pair")
	})
	b.Run("64-way", func(b *testing.B) {
		const block = 64 * 8
		var callT, pairT time.Duration
		var calls, pairs int
		for calls < b.N {
			callT += fanOut(b, block, call)
			pairT += fanOut(b, block, pair)
			calls += block
			pairs += block
		}
		b.ReportMetric(float64(calls)/callT.Seconds(), "call/s")
		b.ReportMetric(float64(pairs)/pairT.Seconds(), "bare-pair/s")
		b.ReportMetric(pairT.Seconds()/callT.Seconds()*float64(calls)/float64(pairs), "call-throughput/pair")
	})
}

// fanOut runs fn n times on 64 goroutines and returns the wall time.
func fanOut(b *testing.B, n int, fn func(*testing.B)) time.Duration {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				fn(b)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}
