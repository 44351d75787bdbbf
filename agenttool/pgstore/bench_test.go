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
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
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
	// Each caller acts in a conversation of its own: one write of a tool
	// runs at a time in a conversation (the unknown fence's slot).
	var scopes [64]context.Context
	for g := range scopes {
		scopes[g] = agenttool.WithScope(ctx, "tenant-1", "bench-"+strconv.Itoa(g))
	}
	var seq atomic.Int64
	call := func(b *testing.B, g int) {
		in := `{"to":"user` + strconv.FormatInt(seq.Add(1), 10) + `@example.com"}`
		if env := tool.Invoke(scopes[g], in); env.Status != envelope.Success {
			b.Fatal(env)
		}
	}
	outcome := []byte(`{"version":1,"status":"success","tool":"send_email","attempts":1,"result":"sent","next":"continue"}`)
	digest := make([]byte, 32)
	pair := func(b *testing.B, _ int) {
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
	// The store's own two statements, without the guarded tool around
	// them, each timed: a claim of a new key in a free slot of the fence
	// (the records_slot index answers the fence in the INSERT itself), and
	// the outcome.
	var session = storekit.Digest{0x5e}
	storeOps := func(b *testing.B) (claim, finish time.Duration) {
		key := "send_email/" + strconv.FormatInt(seq.Add(1), 10) + "abcdefghijklmnopqrstuvwxyz"
		now := time.Now()
		res, err := store.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send_email", Owner: "2b7c4f5e-8a4d-4f7e-9d6c-1f2e3d4c5b6a",
			Now: now, Lease: time.Minute, Session: session, FenceScope: session})
		claim = time.Since(now)
		if err != nil || !res.Claimed {
			b.Fatal(res, err)
		}
		t1 := time.Now()
		if err := store.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: agenttool.Succeeded,
			Attempts: 1, Outcome: outcome, Now: now, TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
		return claim, time.Since(t1)
	}
	// The bare pair, each statement timed.
	bareOps := func(b *testing.B) (insert, update time.Duration) {
		key := "send_email/" + strconv.FormatInt(seq.Add(1), 10) + "abcdefghijklmnopqrstuvwxyz"
		now := time.Now()
		var token int64
		if err := store.Pool().QueryRow(ctx, `INSERT INTO `+bare+` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated)
			VALUES ($1, 'send_email', 1, $2, $2, '2b7c4f5e-8a4d-4f7e-9d6c-1f2e3d4c5b6a', $3, $4, 0, $5, $5)
			ON CONFLICT (key) DO NOTHING RETURNING token`, key, digest, seq.Load(), now.Add(time.Minute), now).Scan(&token); err != nil {
			b.Fatal(err)
		}
		insert = time.Since(now)
		t1 := time.Now()
		if _, err := store.Pool().Exec(ctx, `UPDATE `+bare+` SET state = 2, owner = '', lease_expiry = NULL, attempts = 1, outcome = $3,
			updated = $4, expires = $5 WHERE key = $1 AND token = $2 AND state = 1`, key, token, outcome, now, now.Add(24*time.Hour)); err != nil {
			b.Fatal(err)
		}
		return insert, time.Since(t1)
	}
	// Disk latency drifts over seconds, so the three are measured in
	// alternation and reported side by side with their ratios.
	b.Run("single", func(b *testing.B) {
		var callT, claimT, finishT, insertT, updateT time.Duration
		for b.Loop() {
			t0 := time.Now()
			call(b, 0)
			callT += time.Since(t0)
			c, f := storeOps(b)
			i, u := bareOps(b)
			claimT, finishT, insertT, updateT = claimT+c, finishT+f, insertT+i, updateT+u
		}
		pairT := insertT + updateT
		b.ReportMetric(float64(callT.Nanoseconds())/float64(b.N), "call-ns")
		b.ReportMetric(float64((claimT+finishT).Nanoseconds())/float64(b.N), "store-ns")
		b.ReportMetric(float64(pairT.Nanoseconds())/float64(b.N), "bare-pair-ns")
		b.ReportMetric(float64(callT)/float64(pairT), "call/pair")
		b.ReportMetric(float64(claimT)/float64(insertT), "claim/insert")
		b.ReportMetric(float64(finishT)/float64(updateT), "finish/update")
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

// fanOut runs fn n times on 64 goroutines, each given its number, and
// returns the wall time.
func fanOut(b *testing.B, n int, fn func(b *testing.B, g int)) time.Duration {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	start := time.Now()
	for g := range 64 {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				fn(b, g)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkGroupCommit compares, in one run and on one server, 64 callers
// each claiming a new key and recording its outcome (Claim, then Finish)
// on three stores over one schema: the store as it is (batches written as
// multi-row statements), batches written as pipelined single statements in
// one implicit transaction, and every write alone (no group commit). The
// three are measured in turn, round after round, and reported in claims
// and outcomes per second, with the mean size of a batch.
//
//	DATABASE_URL=… go test -run '^$' -bench BenchmarkGroupCommit ./agenttool/pgstore/
func BenchmarkGroupCommit(b *testing.B) {
	multi := pgtest.Open(b)
	ctx := context.Background()
	open := func(mode func(*pgstore.Store)) *pgstore.Store {
		s, err := pgstore.Open(ctx, &pgstore.Options{URL: pgtest.URL(b), Schema: multi.Schema()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		mode(s)
		return s
	}
	stores := []struct {
		name string
		s    *pgstore.Store
		took time.Duration
	}{{name: "multi-row", s: multi}, {name: "pipelined", s: open(pgstore.Pipeline)}, {name: "alone", s: open(pgstore.Alone)}}
	var seq atomic.Int64
	outcome := []byte(`{"version":1,"status":"success","tool":"send_email","attempts":1,"result":"sent","next":"continue"}`)
	op := func(s *pgstore.Store) func(b *testing.B, g int) {
		return func(b *testing.B, g int) {
			key := "send_email/" + strconv.FormatInt(seq.Add(1), 10) + "abcdefghijklmnopqrstuvwxyz"
			session := storekit.Digest{0x5e, byte(g)}
			now := time.Now()
			res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send_email", Owner: key, Now: now, Lease: time.Minute,
				Session: session, FenceScope: session})
			if err != nil || !res.Claimed {
				b.Fatal(res, err)
			}
			if err := s.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: agenttool.Succeeded,
				Attempts: 1, Outcome: outcome, Now: now, TTL: time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
	}
	const block = 64 * 8
	n := 0
	for n < b.N {
		for i := range stores {
			stores[i].took += fanOut(b, block, op(stores[i].s))
		}
		n += block
	}
	for _, st := range stores {
		b.ReportMetric(float64(n)/st.took.Seconds(), st.name+"-calls/s")
		if g := st.s.GroupCommitStats(); g.ClaimBatches > 0 && g.OutcomeBatches > 0 {
			b.ReportMetric(float64(g.Claims)/float64(g.ClaimBatches), st.name+"-claims/batch")
			b.ReportMetric(float64(g.Outcomes)/float64(g.OutcomeBatches), st.name+"-outcomes/batch")
		}
	}
}
