package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// A sweep step's commit does not wait for the disk, and that is the
// step's alone: on the one connection of a pool, the statements after it
// — a claim's, or a transaction's — run with the session's
// synchronous_commit, not the step's.
func TestASweepStepsAsynchronousCommitStaysInItsStatement(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = 1, 0
	pgstore.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := pgstore.Open(ctx, &pgstore.Options{Pool: pool, Schema: pgtest.Schema(t, url)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	for _, key := range []string{"a", "b"} {
		res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "t", Owner: "o", Now: now, Lease: time.Minute})
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v %v", key, res, err)
		}
		if err := s.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: storekit.Succeeded, Attempts: 1,
			Outcome: []byte(`{}`), Now: now, TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Sweep(ctx, storekit.SweepRequest{Now: now.Add(time.Minute), Limit: 1}); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	var after string
	if err := pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&after); err != nil || after != "on" {
		t.Fatalf("after a sweep step, the connection's next statement runs with synchronous_commit %q (%v); want on", after, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := tx.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&after); err != nil || after != "on" {
		t.Fatalf("in a transaction after a sweep step: synchronous_commit %q (%v); want on", after, err)
	}
}
