package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// Faults of the real server in the middle of a shared batch (group
// commit): a batch is held on a row lock of another transaction, then its
// backend is killed, or its statement times out. Every caller of the batch
// still gets its own answer (the database is up), or — for the write the
// lock keeps timing out — an error, with nothing written for it.

// batchFixture is a store whose connections carry an application name of
// their own, over a fresh schema, and an administrator's connection.
type batchFixture struct {
	t            *testing.T
	store        *pgstore.Store
	admin, watch *pgx.Conn
	app, table   string
	holder       int // the backend of the administrator's transaction
}

func newBatchFixture(t *testing.T, params string) *batchFixture {
	url := pgtest.URL(t)
	schema := pgtest.Schema(t, url)
	migrated, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	migrated.Close()
	app := fmt.Sprintf("batch_%d", time.Now().UnixNano())
	store, err := pgstore.Open(context.Background(), &pgstore.Options{URL: pgtest.Param(t, url, "application_name="+app+params), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	var conns [2]*pgx.Conn
	for i := range conns {
		if conns[i], err = pgx.Connect(context.Background(), url); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conns[i].Close(context.Background()) })
	}
	return &batchFixture{t: t, store: store, admin: conns[0], watch: conns[1], app: app, table: pgx.Identifier{schema, "records"}.Sanitize()}
}

// hold opens a transaction of the administrator's that holds key: a row
// it inserts and has not committed (held for a claim), or the record's row
// locked (held for an outcome). The transaction rolls back when the
// returned function is called.
func (f *batchFixture) hold(key string, exists bool) (release func()) {
	ctx := context.Background()
	tx, err := f.admin.Begin(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	if exists {
		_, err = tx.Exec(ctx, `SELECT 1 FROM `+f.table+` WHERE key = $1 FOR UPDATE`, key)
	} else {
		_, err = tx.Exec(ctx, `INSERT INTO `+f.table+` (key, tool, state, principal, fingerprint, token, created, updated)
			VALUES ($1, 'holder', 1, $2, $2, 0, now(), now())`, key, make([]byte, 32))
	}
	if err != nil {
		f.t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		f.t.Fatal(err)
	}
	f.holder = pid
	return func() { tx.Rollback(ctx) }
}

// waitingBatch waits until one of the store's backends waits on the
// holder's lock, and returns its pid: the batch is then in the middle of
// its statement.
func (f *batchFixture) waitingBatch() int {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pids []int32
		err := f.watch.QueryRow(context.Background(), `SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
			WHERE application_name = $1 AND $2 = ANY(pg_blocking_pids(pid))`, f.app, f.holder).Scan(&pids)
		if err != nil {
			f.t.Fatal(err)
		}
		if len(pids) > 0 {
			return int(pids[0])
		}
		if time.Now().After(deadline) {
			f.t.Fatal("no batch came to wait on the held row")
		}
		time.Sleep(2 * time.Millisecond) // polls the server's state; orders nothing
	}
}

// kill ends a backend, as an administrator or a crash of it would.
func (f *batchFixture) kill(pid int) {
	var ok bool
	if err := f.watch.QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		f.t.Fatalf("terminating backend %d: %v, %v", pid, ok, err)
	}
}

// claims claims n new keys of slots of their own, together; key i is
// prefix-i.
func claimsOf(prefix string, n int) []storekit.ClaimRequest {
	reqs := make([]storekit.ClaimRequest, n)
	for i := range reqs {
		key := fmt.Sprintf("%s-%d", prefix, i)
		scope := storekit.Digest{0xba, byte(i)}
		reqs[i] = storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: storekit.Digest{1}, Fingerprint: storekit.Digest{2},
			Session: scope, FenceScope: scope, Owner: "owner-" + key, Now: time.Now(), Lease: time.Minute}
	}
	return reqs
}

// together runs fn(0) … fn(n-1) at once; the returned function waits for
// them.
func together(n int, fn func(i int)) (wait func()) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { fn(i) })
	}
	return wg.Wait
}

// settled checks that each claim was granted, under the token its record
// holds, and that no token was granted twice.
func (f *batchFixture) granted(reqs []storekit.ClaimRequest, res []storekit.ClaimResult, errs []error, skip int) {
	f.t.Helper()
	seen := map[uint64]bool{}
	for i, req := range reqs {
		if i == skip {
			continue
		}
		if errs[i] != nil || !res[i].Claimed {
			f.t.Errorf("claim %s: claimed %v, blocked by %v, error %v; want it granted: the database is up", req.Key, res[i].Claimed, res[i].Blocked, errs[i])
			continue
		}
		rec, err := f.store.Get(context.Background(), req.Key)
		if err != nil || rec.Token != res[i].Record.Token || rec.Owner != req.Owner || seen[rec.Token] {
			f.t.Errorf("claim %s was granted token %d; its record is %+v, %v", req.Key, res[i].Record.Token, rec, err)
		}
		seen[rec.Token] = true
	}
}

func (f *batchFixture) finishes(reqs []storekit.ClaimRequest) []storekit.FinishRequest {
	fins := make([]storekit.FinishRequest, len(reqs))
	for i, req := range reqs {
		res, err := f.store.Claim(context.Background(), req)
		if err != nil || !res.Claimed {
			f.t.Fatal(res, err)
		}
		fins[i] = storekit.FinishRequest{Key: req.Key, Token: res.Record.Token, State: storekit.Succeeded, Attempts: 1,
			Outcome: []byte(fmt.Sprintf(`"outcome %d"`, i)), Now: time.Now(), TTL: time.Hour}
	}
	return fins
}

// recorded checks that each outcome was written under its token.
func (f *batchFixture) recorded(fins []storekit.FinishRequest, errs []error, skip int) {
	f.t.Helper()
	for i, fin := range fins {
		if i == skip {
			continue
		}
		rec, err := f.store.Get(context.Background(), fin.Key)
		if errs[i] != nil || err != nil || rec.State != storekit.Succeeded || rec.Token != fin.Token || string(rec.Outcome) != string(fin.Outcome) {
			f.t.Errorf("outcome of %s: %v; its record is %+v, %v; want it written: the database is up", fin.Key, errs[i], rec, err)
		}
	}
}

// A batch whose backend is killed in the middle of its statement: the
// store cannot know whether it committed, looks, and each caller gets its
// own answer — here every claim granted and every outcome written, once.
func TestGroupCommit_BackendKilledMidBatchLosesNothing(t *testing.T) {
	const n, held = 6, 2
	t.Run("claims", func(t *testing.T) {
		f := newBatchFixture(t, "")
		reqs := claimsOf("killed", n)
		release := f.hold(reqs[held].Key, false)
		pgstore.GatherClaims(f.store, n, 0)
		res, errs := make([]storekit.ClaimResult, n), make([]error, n)
		wait := together(n, func(i int) { res[i], errs[i] = f.store.Claim(context.Background(), reqs[i]) })
		f.kill(f.waitingBatch())
		release()
		wait()
		f.granted(reqs, res, errs, -1)
	})
	t.Run("outcomes", func(t *testing.T) {
		f := newBatchFixture(t, "")
		fins := f.finishes(claimsOf("killed", n))
		release := f.hold(fins[held].Key, true)
		pgstore.GatherOutcomes(f.store, n, 0)
		errs := make([]error, n)
		wait := together(n, func(i int) { errs[i] = f.store.Finish(context.Background(), fins[i]) })
		f.kill(f.waitingBatch())
		release()
		wait()
		f.recorded(fins, errs, -1)
	})
}

// A batch whose statement times out (statement_timeout) on a row another
// transaction holds: the database refused it whole, so each write runs
// again alone; the others are written, and the one the lock keeps timing
// out fails on its own, with nothing written for it.
func TestGroupCommit_StatementTimeoutMidBatchFailsOnlyItsOwn(t *testing.T) {
	const n, held = 6, 2
	timeout := "&options=-c%20statement_timeout%3D400"
	isTimeout := func(err error) bool { return err != nil && strings.Contains(err.Error(), "statement timeout") }
	t.Run("claims", func(t *testing.T) {
		f := newBatchFixture(t, timeout)
		reqs := claimsOf("timeout", n)
		release := f.hold(reqs[held].Key, false)
		pgstore.GatherClaims(f.store, n, 0)
		res, errs := make([]storekit.ClaimResult, n), make([]error, n)
		wait := together(n, func(i int) { res[i], errs[i] = f.store.Claim(context.Background(), reqs[i]) })
		f.waitingBatch()
		wait()
		release()
		f.granted(reqs, res, errs, held)
		if !isTimeout(errs[held]) || res[held].Claimed {
			t.Errorf("the claim of the held key: claimed %v, %v; want the statement timeout", res[held].Claimed, errs[held])
		}
		if _, err := f.store.Get(context.Background(), reqs[held].Key); !errors.Is(err, storekit.ErrNotFound) {
			t.Errorf("the claim that timed out left a record: %v", err)
		}
		if res, err := f.store.Claim(context.Background(), reqs[held]); err != nil || !res.Claimed {
			t.Errorf("the held key, once free: claimed %v, %v; want it granted", res.Claimed, err)
		}
	})
	t.Run("outcomes", func(t *testing.T) {
		f := newBatchFixture(t, timeout)
		fins := f.finishes(claimsOf("timeout", n))
		release := f.hold(fins[held].Key, true)
		pgstore.GatherOutcomes(f.store, n, 0)
		errs := make([]error, n)
		wait := together(n, func(i int) { errs[i] = f.store.Finish(context.Background(), fins[i]) })
		f.waitingBatch()
		wait()
		release()
		f.recorded(fins, errs, held)
		if !isTimeout(errs[held]) {
			t.Errorf("the outcome of the held record: %v; want the statement timeout", errs[held])
		}
		if rec, err := f.store.Get(context.Background(), fins[held].Key); err != nil || rec.State != storekit.Pending || rec.Token != fins[held].Token {
			t.Errorf("the held record after its outcome timed out: %+v, %v; want it pending under its token", rec, err)
		}
		if err := f.store.Finish(context.Background(), fins[held]); err != nil {
			t.Errorf("the held record's outcome, once free: %v", err)
		}
	})
}
