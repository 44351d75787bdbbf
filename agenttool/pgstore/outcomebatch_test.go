package pgstore_test

// What a batch of outcomes (finishUnnest: throughIndexes, then finishMany, in one
// transaction) keeps, whatever happens to it: a plan that reads only its
// rows however the table grew after the plan was made, settings that stay
// in its transaction, and an answer to each caller that says what its
// record holds, when the batch is refused, times out, or loses its
// connection between its statements or after its commit. And a claim the
// store cannot decide never reaches a batch of claims.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// batchQueryModes are pgx's query modes, as URL parameters.
var batchQueryModes = []struct{ name, params string }{
	{"cache_statement", ""},
	{"cache_statement without descriptions", "&description_cache_capacity=0"},
	{"cache_describe", "&default_query_exec_mode=cache_describe"},
	{"describe_exec", "&default_query_exec_mode=describe_exec"},
	{"exec", "&default_query_exec_mode=exec"},
	{"simple_protocol", "&default_query_exec_mode=simple_protocol"},
}

// batchFill inserts n settled records keyed prefix-1 … prefix-n.
func batchFill(t *testing.T, url, schema, prefix string, n int, now time.Time) {
	t.Helper()
	principal := storekit.Digest(sha256.Sum256([]byte("tenant-1/ana")))
	records := pgx.Identifier{schema, "records"}.Sanitize()
	admin(t, url, `INSERT INTO `+records+` (key, tool, state, principal, fingerprint, owner, token, attempts, outcome, created, updated, expires, session, fence_scope)
		SELECT '`+prefix+`-' || i, 'send_email', 2, '\x`+hex.EncodeToString(principal[:])+`'::bytea, sha256(('`+prefix+`' || i)::bytea), '', 1000000 + i, 1, '\x7b7d', '`+now.Format(time.RFC3339Nano)+`', '`+now.Format(time.RFC3339Nano)+`',
			'`+now.Add(24*time.Hour).Format(time.RFC3339Nano)+`', sha256(('`+prefix+`' || i)::bytea), sha256(('`+prefix+`' || i)::bytea)
		FROM generate_series(1, `+strconv.Itoa(n)+`) AS i`)
}

// batchClaimsOf is claimsOf with a slot of its own for each key, whatever
// the prefix.
func batchClaimsOf(prefix string, n int) []storekit.ClaimRequest {
	reqs := claimsOf(prefix, n)
	for i := range reqs {
		scope := storekit.Digest(sha256.Sum256([]byte(reqs[i].Key)))
		reqs[i].Session, reqs[i].FenceScope = scope, scope
	}
	return reqs
}

// batchClaims claims n new keys, one after the other (each alone), and
// returns the outcomes that would settle them.
func batchClaims(t *testing.T, s *pgstore.Store, prefix string, n int) []storekit.FinishRequest {
	t.Helper()
	fins := make([]storekit.FinishRequest, n)
	for i, req := range batchClaimsOf(prefix, n) {
		res, err := s.Claim(context.Background(), req)
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v, %v", req.Key, res, err)
		}
		fins[i] = storekit.FinishRequest{Key: req.Key, Token: res.Record.Token, State: storekit.Succeeded, Attempts: 1,
			Outcome: []byte(fmt.Sprintf(`"outcome %d"`, i)), Now: time.Now(), TTL: time.Hour}
	}
	return fins
}

// batchOfOutcomes writes fins as one batch of outcomes, with the failpoint
// fault, and returns each caller's answer. It fails the test if no batch
// was written.
func batchOfOutcomes(t *testing.T, s *pgstore.Store, fins []storekit.FinishRequest, fault int) []error {
	t.Helper()
	before := s.GroupCommitStats().OutcomeBatches
	pgstore.GatherOutcomes(s, len(fins), fault)
	errs := make([]error, len(fins))
	together(len(fins), func(i int) { errs[i] = s.Finish(context.Background(), fins[i]) })()
	if s.GroupCommitStats().OutcomeBatches == before {
		t.Fatal("no batch of outcomes was written")
	}
	return errs
}

// batchAnswersTruly checks that each answer says what the record holds: nil
// where the outcome was written under its token, an error where it was not.
func batchAnswersTruly(t *testing.T, s *pgstore.Store, fins []storekit.FinishRequest, errs []error, wantAll bool) {
	t.Helper()
	for i, fin := range fins {
		rec, err := s.Get(context.Background(), fin.Key)
		if err != nil {
			t.Errorf("get %s: %v", fin.Key, err)
			continue
		}
		written := rec.State == fin.State && rec.Token == fin.Token && string(rec.Outcome) == string(fin.Outcome)
		if written != (errs[i] == nil) {
			t.Errorf("outcome of %s answered %v, but its record is %v under token %d (want %d): the answer lies", fin.Key, errs[i], rec.State, rec.Token, fin.Token)
		}
		if wantAll && !written {
			t.Errorf("outcome of %s not written (%v): the database is up", fin.Key, errs[i])
		}
	}
}

// pkeyReads is how many index entries scans of records_pkey have read.
func pkeyReads(t *testing.T, url, schema string) int64 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(context.Background(), `SELECT idx_tup_read FROM pg_stat_user_indexes WHERE schemaname = $1 AND indexrelname = 'records_pkey'`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The plan a connection keeps for a batch of outcomes (a generic plan,
// planned once and kept: throughIndexes) is made for the table as the planner knows
// it when the connection first runs a batch: analysed while it held a few
// dozen rows, as autovacuum's first ANALYZE of a new table saw it before
// migration 16, or as an operator's ANALYZE or vacuumdb
// --analyze-in-stages leave it. With only
// whole-table scans ruled out, the cheapest plan then was a full scan of
// records_pkey, and the connection kept it as the table grew: each batch
// read every row until the server next analysed the table. throughIndexes leaves no
// way to the table but through an index condition on the batch's keys.
//
// Here the table is analysed small (50 rows, or 10 imported then
// analysed), two batches run, the table grows by 20,000 rows with autovacuum
// kept from analysing it again (the window that lasts until its next
// analyse in production), and one batch of three outcomes is counted in
// the entries of records_pkey it read.
func TestABatchPlannedWhileTheTableWasSmallReadsOnlyItsRowsOnceItGrew(t *testing.T) {
	for _, mode := range []struct{ name, params string }{batchQueryModes[0], {"cache_statement, after an Import of 10 records, analysed", ""}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			url := pgtest.URL(t)
			schema := pgtest.Schema(t, url)
			s, err := pgstore.Open(ctx, &pgstore.Options{URL: pgtest.Param(t, url, "pool_max_conns=1"+mode.params), Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			records := pgx.Identifier{schema, "records"}.Sanitize()
			now := time.Now()
			admin(t, url, `ALTER TABLE `+records+` SET (autovacuum_enabled = false)`)
			if mode.name == "cache_statement, after an Import of 10 records, analysed" {
				// Import leaves a table of 10 rows to autovacuum, which
				// waits for more (analyzeAfter); an operator analyses it.
				recs := make([]storekit.Record, 10)
				for i := range recs {
					d := storekit.Digest(sha256.Sum256([]byte(fmt.Sprint("imported-", i))))
					recs[i] = storekit.Record{Key: fmt.Sprint("imported-", i), Tool: "send_email", State: storekit.Succeeded,
						Principal: d, Fingerprint: d, Session: d, Token: uint64(i + 1), Attempts: 1, Outcome: []byte(`{}`),
						Created: now, Updated: now, Expires: now.Add(24 * time.Hour)}
				}
				if err := s.Import(ctx, recs); err != nil {
					t.Fatal(err)
				}
				admin(t, url, `ANALYZE `+records)
				var reltuples float64
				conn, err := pgx.Connect(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				err = conn.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, records).Scan(&reltuples)
				conn.Close(ctx)
				if err != nil || reltuples != 10 {
					t.Fatalf("after the import and ANALYZE, reltuples %v, %v", reltuples, err)
				}
			} else {
				batchFill(t, url, schema, "early", 50, now)
				admin(t, url, `ANALYZE `+records)
			}

			// The connection's first batches, on the small table.
			for round := range 2 {
				fins := batchClaims(t, s, fmt.Sprintf("small%d", round), 3)
				batchAnswersTruly(t, s, fins, batchOfOutcomes(t, s, fins, 0), true)
			}

			const grown = 20000
			batchFill(t, url, schema, "grown", grown, now)
			fins := batchClaims(t, s, "grown-batch", 3)

			before := pkeyReads(t, url, schema)
			batchAnswersTruly(t, s, fins, batchOfOutcomes(t, s, fins, 0), true)
			// The server's statistics reach the view within a few seconds.
			var read int64
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if read = pkeyReads(t, url, schema) - before; read >= int64(len(fins)) {
					break
				}
			}
			time.Sleep(1500 * time.Millisecond)
			read = pkeyReads(t, url, schema) - before
			t.Logf("%s: one batch of %d outcomes read %d entries of records_pkey (table: %d rows)", mode.name, len(fins), read, grown+50+9)
			// What the store's connection keeps, explained (cache_statement).
			if kept := keptPlan(t, s); kept != "" {
				t.Logf("the plan of finishMany the store's connection keeps, run on the grown table:\n%s", kept)
			}
			if read > 1000 {
				t.Errorf("%s: one batch of %d outcomes read %d entries of records_pkey — the whole table of %d rows — with the plan its connection made while the table was small",
					mode.name, len(fins), read, grown+50+9)
			}
		})
	}
}

// keptPlan explains, with actual rows, the prepared finishMany the store's
// single connection keeps, as the store runs it (after throughIndexes, in one
// transaction, rolled back); "" if the connection keeps none.
func keptPlan(t *testing.T, s *pgstore.Store) string {
	t.Helper()
	ctx := context.Background()
	q := pgstore.BatchQueries(s, time.Now(), "send_email", make([]byte, 32), make([]byte, 32), []string{"x", "y", "z"})["finishMany"]
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var name string
	err = conn.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement = $1`, pgx.QueryExecModeSimpleProtocol, q.SQL).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, q.Before, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+execute(t, name, q.Args), pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// showSettings reads, on conn, the settings throughIndexes and syncOn set locally.
func showSettings(t *testing.T, ctx context.Context, s *pgstore.Store) (pid int, settings string) {
	t.Helper()
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	err = conn.QueryRow(ctx, `SELECT pg_backend_pid(), concat_ws(' ', current_setting('enable_seqscan'), current_setting('enable_indexscan'),
		current_setting('enable_indexonlyscan'), current_setting('enable_hashjoin'),
		current_setting('enable_mergejoin'), current_setting('plan_cache_mode'), current_setting('jit'), current_setting('synchronous_commit'), txid_current_if_assigned() IS NULL)`).Scan(&pid, &settings)
	if err != nil {
		t.Fatal(err)
	}
	return pid, settings
}

// throughIndexes's settings, and syncOn's, are the batch's transaction's
// alone: on the pool's one connection, after a batch written, one refused whole (a
// row the database cannot store), one refused by a statement timeout, one
// cancelled by its callers all leaving, and one lost after its commit (a
// new connection), in every query mode, a later statement sees the
// connection's own settings and no open transaction.
func TestABatchsSettingsStayInItsTransaction(t *testing.T) {
	for _, mode := range batchQueryModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			f := newBatchFixture(t, "&pool_max_conns=1&synchronous_commit=local"+mode.params)
			s := f.store
			pid0, want := showSettings(t, ctx, s)
			if want != "on on on on on auto on local t" {
				t.Fatalf("the connection's own settings: %q", want)
			}
			check := func(what string, samePID bool) {
				t.Helper()
				pid, got := showSettings(t, ctx, s)
				if got != want {
					t.Errorf("after %s: the pooled connection's settings are %q, want %q", what, got, want)
				}
				if samePID && pid != pid0 {
					t.Fatalf("after %s: a new connection (%d, was %d): the check would prove nothing", what, pid, pid0)
				}
				pid0 = pid
			}

			fins := batchClaims(t, s, "ok", 4)
			batchAnswersTruly(t, s, fins, batchOfOutcomes(t, s, fins, 0), true)
			check("a batch written", true)

			fins = batchClaims(t, s, "row", 4)
			batchAnswersTruly(t, s, fins, batchOfOutcomes(t, s, fins, pgstore.FaultRow), true)
			check("a batch refused whole (a row it cannot store)", true)

			// A batch whose callers all leave while it waits on a row lock:
			// its context ends and pgx cancels the statement.
			fins = batchClaims(t, s, "cancel", 4)
			release := f.hold(fins[1].Key, true)
			pgstore.GatherOutcomes(s, len(fins), 0)
			errs := make([]error, len(fins))
			wait := together(len(fins), func(i int) {
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				errs[i] = s.Finish(cctx, fins[i])
			})
			f.waitingBatch()
			wait()
			release()
			for i, err := range errs {
				if err == nil {
					// It may have been written: then it must be.
					rec, gerr := s.Get(ctx, fins[i].Key)
					if gerr != nil || rec.State != storekit.Succeeded || rec.Token != fins[i].Token {
						t.Errorf("outcome %s answered written, its record is %+v, %v", fins[i].Key, rec, gerr)
					}
				}
			}
			pid, got := showSettings(t, ctx, s)
			if got != want {
				t.Errorf("after a batch cancelled by its callers: the pooled connection's settings are %q, want %q", got, want)
			}
			t.Logf("a batch cancelled by its callers: answers %v; the connection after it: %d (before: %d)", errs, pid, pid0)
			pid0, _ = showSettings(t, ctx, s)

			fins = batchClaims(t, s, "lost", 4)
			batchAnswersTruly(t, s, fins, batchOfOutcomes(t, s, fins, pgstore.FaultLostAfterCommit), true)
			check("a batch lost after its commit", false)
			fins = batchClaims(t, s, "lostbefore", 4)
			batchAnswersTruly(t, s, fins, batchOfOutcomes(t, s, fins, pgstore.FaultLostBeforeCommit), true)
			check("a batch lost before its commit", false)
		})
	}
}

// The same, with a statement timeout set on the connection: the batch's
// statement times out on a held row (an ERROR after throughIndexes ran in
// the same transaction), the others are written alone, and the settings do not
// leak.
func TestABatchTimedOutAfterItsSettingsAnswersEachCallerAndLeaksNothing(t *testing.T) {
	for _, mode := range batchQueryModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			f := newBatchFixture(t, "&pool_max_conns=1&options=-c%20statement_timeout%3D400"+mode.params)
			s := f.store
			_, want := showSettings(t, ctx, s)
			fins := batchClaims(t, s, "timeout", 4)
			release := f.hold(fins[2].Key, true)
			pgstore.GatherOutcomes(s, len(fins), 0)
			errs := make([]error, len(fins))
			wait := together(len(fins), func(i int) { errs[i] = s.Finish(ctx, fins[i]) })
			f.waitingBatch()
			wait()
			release()
			if errs[2] == nil {
				t.Errorf("the held record's outcome: nil; want the statement timeout")
			}
			batchAnswersTruly(t, s, fins, errs, false)
			for i := range fins {
				if i != 2 && errs[i] != nil {
					t.Errorf("outcome %s: %v; want it written alone", fins[i].Key, errs[i])
				}
			}
			if _, got := showSettings(t, ctx, s); got != want {
				t.Errorf("after a batch timed out: settings %q, want %q", got, want)
			}
		})
	}
}

// A batch whose backend is killed after throughIndexes ran and while
// finishMany waits on a row lock (its transaction neither committed nor refused, as
// far as the store can tell), in every query mode: each caller's answer is
// what its record holds, and every outcome is written (the database is up).
// Also a batch lost after its commit: the same.
func TestABatchKilledBetweenItsStatementsAnswersEachCallerTruly(t *testing.T) {
	for _, mode := range batchQueryModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			f := newBatchFixture(t, mode.params)
			s := f.store
			fins := batchClaims(t, s, "killed", 6)
			release := f.hold(fins[3].Key, true)
			pgstore.GatherOutcomes(s, len(fins), 0)
			errs := make([]error, len(fins))
			wait := together(len(fins), func(i int) { errs[i] = s.Finish(ctx, fins[i]) })
			f.kill(f.waitingBatch())
			release()
			wait()
			batchAnswersTruly(t, s, fins, errs, true)

			fins = batchClaims(t, s, "after", 6)
			batchAnswersTruly(t, s, fins, batchOfOutcomes(t, s, fins, pgstore.FaultLostAfterCommit), true)
		})
	}
}

// An outcome asked again under the same token after its record was
// settled (a retried Finish), in a batch whose fate is unknown (lost after
// its commit): alone it is refused (ErrFenced), the record no longer
// pending. The batch's lookup answers it written only if the record holds
// that outcome under its token: another payload under the token is
// refused, not answered written.
func TestAnOutcomeAskedAgainInALostBatchIsAnsweredForItsOwnPayload(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Open(t)
	fins := batchClaims(t, s, "repeat", 3)
	for _, fin := range fins {
		if err := s.Finish(ctx, fin); err != nil {
			t.Fatal(err)
		}
	}
	alone := s.Finish(ctx, fins[0])
	other := fins[1]
	other.Outcome = []byte(`"another outcome"`)
	errs := batchOfOutcomes(t, s, []storekit.FinishRequest{fins[0], other, fins[2]}, pgstore.FaultLostAfterCommit)
	t.Logf("a repeated outcome alone: %v; in a lost batch: %v, %v (a different outcome), %v", alone, errs[0], errs[1], errs[2])
	rec, _ := s.Get(ctx, other.Key)
	if errs[1] == nil && string(rec.Outcome) != string(other.Outcome) {
		t.Errorf("the batch answered the outcome %s of %s written; its record holds %s", other.Outcome, other.Key, rec.Outcome)
	}
}

// An invalid claim (a lease that is not positive, a replacement with no
// lifetime, alone or with every other field a claim may carry) never
// enters a batch of claims and writes nothing; a valid claim of the same
// key, in a batch, is granted once.
func TestAnInvalidClaimNeverReachesABatch(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Open(t)
	reqs := batchClaimsOf("invalid", 4)
	bad := make([]storekit.ClaimRequest, 0, 4)
	for i, req := range reqs {
		switch i % 4 {
		case 0:
			req.Lease = -time.Second
		case 1:
			req.Lease = 0
			req.TakeOver, req.Unkeyed = true, true
		case 2:
			req.Replace = &storekit.Replacement{Key: "other", TTL: -time.Hour}
		case 3:
			req.Replace = &storekit.Replacement{Key: "other"}
			req.FoundApplied, req.NoticeHold, req.KeyTTL = "x", time.Minute, time.Hour
		}
		bad = append(bad, req)
	}
	var wg sync.WaitGroup
	for _, req := range bad {
		wg.Go(func() {
			res, err := s.Claim(ctx, req)
			if !errors.Is(err, storekit.ErrInvalidRequest) || res.Claimed {
				t.Errorf("invalid claim %s: %+v, %v", req.Key, res, err)
			}
		})
	}
	wg.Wait()
	if st := s.GroupCommitStats(); st.Claims != 0 {
		t.Errorf("invalid claims reached a batch: %+v", st)
	}
	pgstore.GatherClaims(s, len(reqs), 0)
	res := make([]storekit.ClaimResult, len(reqs))
	errs := make([]error, len(reqs))
	together(len(reqs), func(i int) { res[i], errs[i] = s.Claim(ctx, reqs[i]) })()
	seen := map[uint64]bool{}
	for i := range reqs {
		if errs[i] != nil || !res[i].Claimed || seen[res[i].Record.Token] {
			t.Errorf("valid claim %s after the invalid one: %+v, %v", reqs[i].Key, res[i], errs[i])
		}
		seen[res[i].Record.Token] = true
		if again, err := s.Claim(ctx, reqs[i]); err != nil || again.Claimed {
			t.Errorf("claim of %s again: granted twice: %+v, %v", reqs[i].Key, again, err)
		}
	}
}
