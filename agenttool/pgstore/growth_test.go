package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// rowsRead runs EXPLAIN (ANALYZE) of the prepared statement q with each
// plan_cache_mode and returns, by mode, the rows its scans read: those
// they returned and those they read and dropped (by a filter, or on
// rechecking a bitmap's pages).
func rowsRead(t *testing.T, url, name string, q pgstore.Query) map[string]int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+q.SQL); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out := map[string]int{}
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		var plan []byte
		if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+execute(t, name, q.Args)).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var root []struct{ Plan planNode }
		if err := json.Unmarshal(plan, &root); err != nil || len(root) != 1 {
			t.Fatalf("%s: %v: %s", name, err, plan)
		}
		out[mode] = root[0].Plan.read()
	}
	return out
}

type planNode struct {
	NodeType       string     `json:"Node Type"`
	ActualRows     float64    `json:"Actual Rows"`
	ActualLoops    float64    `json:"Actual Loops"`
	RemovedFilter  float64    `json:"Rows Removed by Filter"`
	RemovedRecheck float64    `json:"Rows Removed by Index Recheck"`
	Plans          []planNode `json:"Plans"`
}

// read sums the rows the scans of the plan read.
func (p planNode) read() int {
	n := 0
	if strings.Contains(p.NodeType, "Scan") && p.NodeType != "Bitmap Index Scan" {
		n = int(p.ActualRows*p.ActualLoops + p.RemovedFilter + p.RemovedRecheck)
	}
	for _, c := range p.Plans {
		n += c.read()
	}
	return n
}

// The store stays flat as it fills: a page of a listing reads its page,
// not the store. Other tenants keep 3,000 open records whose keys come
// before Ana's 60 (a hundred tenants, thirty each), among 20,000 settled
// ones; a page of 50 of Ana's open
// records of one tool — the listing an operator command or the fence's
// user sees — reads hers alone (at most all 60 of them), and a page of
// all open records reads its page, once the planner knows the table: after
// ANALYZE, or after an Import, which analyses a table it grew by a tenth.
func TestAListingReadsItsPageNotTheStore(t *testing.T) {
	for _, how := range []string{"analysed", "imported"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			s := pgtest.Open(t)
			url := pgtest.URL(t)
			records := pgx.Identifier{s.Schema(), "records"}.Sanitize()
			admin(t, url, `ALTER TABLE `+records+` SET (autovacuum_enabled = false)`)
			now := time.Now()
			ana := storekit.Digest(sha256.Sum256([]byte("tenant-2/ana")))
			var recs []storekit.Record
			open := func(key string, principal func(i int) storekit.Digest, n int) {
				for i := range n {
					d := storekit.Digest(sha256.Sum256(fmt.Appendf(nil, "%s-%d", key, i)))
					recs = append(recs, storekit.Record{Key: fmt.Sprintf("%s-%05d", key, i), Tool: "send_email", State: storekit.Unknown,
						Principal: principal(i), Session: d, Fingerprint: d, Token: uint64(len(recs) + 1), Attempts: 1, Created: now, Updated: now})
				}
			}
			// A hundred other tenants, thirty open records each.
			open("a-other", func(i int) storekit.Digest { return sha256.Sum256(fmt.Appendf(nil, "tenant-%d", i%100)) }, 3000)
			open("m-ana", func(int) storekit.Digest { return ana }, 60)
			for i := range 20_000 {
				d := storekit.Digest(sha256.Sum256(fmt.Appendf(nil, "settled-%d", i)))
				recs = append(recs, storekit.Record{Key: fmt.Sprintf("settled-%05d", i), Tool: "send_email", State: storekit.Succeeded,
					Principal: sha256.Sum256(fmt.Appendf(nil, "tenant-%d", i%100)), Session: d, Fingerprint: d, Token: uint64(len(recs) + 1), Attempts: 1, Outcome: []byte("{}"),
					Created: now, Updated: now, Expires: now.Add(time.Hour)})
			}
			if err := s.Import(ctx, recs); err != nil {
				t.Fatal(err)
			}
			if how == "analysed" {
				admin(t, url, `ANALYZE `+records)
			}

			page, err := s.ListUnknown(ctx, storekit.ListRequest{Now: now, Tool: "send_email", Principal: &ana, Limit: 50})
			if err != nil || len(page) != 50 || !strings.HasPrefix(page[0].Key, "m-ana-") {
				t.Fatalf("a page of Ana's open records: %d, %v", len(page), err)
			}
			var none []byte
			for name, c := range map[string]struct {
				q   pgstore.Query
				max int
			}{
				"scope":      {pgstore.Query{SQL: pgstore.Statement(s, "listScope"), Args: []any{now, "", ana[:], 50, "send_email", none}}, 60},
				"principal":  {pgstore.Query{SQL: pgstore.Statement(s, "listUnknown"), Args: []any{now, "", ana[:], 50, "", none}}, 60},
				"everything": {pgstore.Query{SQL: pgstore.Statement(s, "listUnknown"), Args: []any{now, "", none, 50, "", none}}, 50},
			} {
				for mode, n := range rowsRead(t, url, name, c.q) {
					t.Logf("%s (%s): %d rows read", name, mode, n)
					// The store has its listings planned for their
					// arguments (replanned): a generic plan is only logged.
					if mode == "force_custom_plan" && n > c.max {
						t.Errorf("a page of 50 (%s, %s) read %d rows; want at most %d", name, mode, n, c.max)
					}
				}
			}
		})
	}
}

// A sweep step reads its step, not the records kept past their lifetime
// while a mark lasts (storekit.Record.SweepAt): 2,000 actions approved
// for one more attempt, each marked until its model is told, their
// lifetime over, are read by no step, nor are 20,000 records whose
// lifetime has not ended; a step of 50 reads the 50 it deletes (each
// through the index, the step's list and the key: 150 rows at most, and
// a few more).
func TestASweepStepReadsItsStepNotTheMarksKeptPastTheirLifetime(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Open(t)
	url := pgtest.URL(t)
	records := pgx.Identifier{s.Schema(), "records"}.Sanitize()
	admin(t, url, `ALTER TABLE `+records+` SET (autovacuum_enabled = false)`)
	now := time.Now().Truncate(time.Second)
	var recs []storekit.Record
	add := func(prefix string, n int, f func(r *storekit.Record)) {
		for i := range n {
			d := storekit.Digest(sha256.Sum256(fmt.Appendf(nil, "%s-%d", prefix, i)))
			r := storekit.Record{Key: fmt.Sprintf("%s-%05d", prefix, i), Tool: "send_email", State: storekit.Succeeded,
				Principal: d, Session: d, Fingerprint: d, Token: uint64(len(recs) + 1), Attempts: 1, Outcome: []byte("{}"),
				Created: now.Add(-3 * time.Hour), Updated: now.Add(-2 * time.Hour)}
			f(&r)
			recs = append(recs, r)
		}
	}
	add("marked", 2000, func(r *storekit.Record) {
		r.State, r.RetryApproved, r.Expires = storekit.Unknown, true, now.Add(-time.Hour-time.Duration(len(recs))*time.Millisecond)
		r.NoticeUntil, r.StandsFor = storekit.UntilTold, "send_email/applied"
	})
	add("due", 200, func(r *storekit.Record) { r.Expires = now.Add(-time.Minute) })
	add("kept", 20_000, func(r *storekit.Record) { r.Expires = now.Add(time.Hour) })
	if err := s.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	admin(t, url, `ANALYZE `+records)
	for mode, n := range rowsRead(t, url, "sweep", pgstore.Query{SQL: pgstore.Statement(s, "sweep"), Args: []any{now, 50}}) {
		t.Logf("a sweep step of 50 (%s): %d rows read", mode, n)
		// The store has its sweep planned for its arguments (replanned):
		// a generic plan is only logged.
		if mode == "force_custom_plan" && n > 160 {
			t.Errorf("a sweep step of 50 (%s) read %d rows; want its step (at most 160)", mode, n)
		}
	}
	n, err := storekit.SweepAll(ctx, s, now, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var left, marked int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE key LIKE 'due-%'), count(*) FILTER (WHERE key LIKE 'marked-%') FROM `+records).Scan(&left, &marked); err != nil {
		t.Fatal(err)
	}
	if left != 0 || marked != 2000 {
		t.Errorf("after the sweep (%d deleted then): %d of the due records left, %d of 2,000 marked ones; want none, all", n, left, marked)
	}
}

// A store that begins on a new table goes on reading one record by its
// key through the primary key as the table grows. A connection keeps the
// plan of each statement it prepared — a lone claim's insert, a lone
// outcome, the read of one key — and the planner takes a table never
// analysed for ten pages at least, so those plans use the key; analysed
// while it held a few dozen rows, one page, the table is cheaper to read
// whole, and a plan made then read every row at each call until the table
// was next analysed (a naptime or more, while it may grow by thousands of
// rows a second). So autovacuum is set (migration 16) to analyse or vacuum
// the table first only once it has more records than that: here it is
// analysed and vacuumed as autovacuum first would at the earliest, the
// store's connection makes its plans, and the table grows by 20,000 rows
// with no analysis since; each lone statement then reads the table only by
// its key.
func TestAStoreFromNewReadsOneRecordByItsKeyAsItGrows(t *testing.T) {
	k := newKeyReads(t)
	// The earliest autovacuum runs on the table: PostgreSQL's defaults
	// unless the table says otherwise; an action changes its row twice
	// (claim, outcome) and leaves one dead row.
	threshold := map[string]int{"autovacuum_vacuum_threshold": 50, "autovacuum_vacuum_insert_threshold": 1000, "autovacuum_analyze_threshold": 50}
	for _, o := range k.options {
		name, value, _ := strings.Cut(o, "=")
		if _, ok := threshold[name]; ok {
			var v int
			fmt.Sscan(value, &v)
			threshold[name] = v
		}
	}
	first := min(threshold["autovacuum_vacuum_threshold"], threshold["autovacuum_vacuum_insert_threshold"], threshold["autovacuum_analyze_threshold"]/2)
	t.Logf("table options %v: autovacuum may first run at %d records", k.options, first)
	fill(t, k.url, k.s.Schema(), first, k.now, k.principal)
	admin(t, k.url, `VACUUM ANALYZE `+k.records)
	k.lone("small", 8)
	k.grow()
	before := k.seqRead()
	k.lone("late", 4)
	if read := k.seqRead() - before; read > 0 {
		t.Errorf("4 lone claims, outcomes and reads on a table analysed at %d records, then grown by 20,000: whole-table reads returned %d rows; want none", first, read)
	}
}

// A store whose sweep emptied the table — a quiet night after a busy day,
// every record past its lifetime — goes on reading one record by its key
// as the table fills again. Vacuum does not give the emptied pages back to
// the filesystem (vacuum_truncate off, migration 16), so the planner still
// counts them, and the plans made while the table is empty still use the
// key; truncated to a page or none, the table was read whole by each lone
// statement until it was next analysed. (Truncating also locks the table
// against every claim meanwhile.)
func TestAStoreTheSweepEmptiedReadsOneRecordByItsKeyAsItFillsAgain(t *testing.T) {
	k := newKeyReads(t)
	fill(t, k.url, k.s.Schema(), 5000, k.now, k.principal)
	admin(t, k.url, `VACUUM ANALYZE `+k.records)
	k.lone("busy", 8)
	// Every record's lifetime passes: the sweep deletes them, and
	// autovacuum vacuums and analyses the emptied table.
	if _, err := k.s.Sweep(context.Background(), storekit.SweepRequest{Now: k.now.Add(48 * time.Hour), Limit: 100000}); err != nil {
		t.Fatal(err)
	}
	admin(t, k.url, `VACUUM ANALYZE `+k.records)
	var pages int
	if err := k.conn.QueryRow(context.Background(), `SELECT relpages FROM pg_class WHERE oid = $1::regclass`, k.records).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	t.Logf("the emptied table, vacuumed: %d pages", pages)
	k.lone("quiet", 8)
	k.grow()
	before := k.seqRead()
	k.lone("morning", 4)
	if read := k.seqRead() - before; read > 0 {
		t.Errorf("4 lone claims, outcomes and reads on a table emptied by the sweep and vacuumed, then grown by 20,000: whole-table reads returned %d rows; want none", read)
	}
}

// keyReads is a store on a new table, its one connection looked at, and
// what the tests of one record's reads share.
type keyReads struct {
	t         *testing.T
	s         *pgstore.Store
	conn      *pgx.Conn // the looker's own
	url       string
	records   string
	options   []string // the table's storage options
	now       time.Time
	principal storekit.Digest
}

// newKeyReads opens a store of one connection on a new table, with
// autovacuum kept off it: the test analyses and vacuums it itself.
func newKeyReads(t *testing.T) *keyReads {
	ctx := context.Background()
	url := pgtest.URL(t)
	schema := pgtest.Schema(t, url)
	s, err := pgstore.Open(ctx, &pgstore.Options{URL: pgtest.Param(t, url, "pool_max_conns=1"), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	k := &keyReads{t: t, s: s, conn: conn, url: url, records: pgx.Identifier{schema, "records"}.Sanitize(), now: time.Now(),
		principal: storekit.Digest(sha256.Sum256([]byte("tenant-1/ana")))}
	if err := conn.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`, k.records).Scan(&k.options); err != nil {
		t.Fatal(err)
	}
	admin(t, url, `ALTER TABLE `+k.records+` SET (autovacuum_enabled = false)`)
	return k
}

// seqRead is how many rows whole-table reads of the records table returned
// so far, the store's connection's included (its statistics flushed).
func (k *keyReads) seqRead() int64 {
	t := k.t
	t.Helper()
	ctx := context.Background()
	c, err := k.s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	c.Release()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := k.conn.QueryRow(ctx, `SELECT pg_stat_clear_snapshot(), seq_tup_read FROM pg_stat_user_tables WHERE relid = $1::regclass`,
		k.records).Scan(nil, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// lone runs n actions, one after the other, each alone: a claim, its
// outcome, a read of its record, and the action asked again — more than
// the five runs after which the server may keep a generic plan.
func (k *keyReads) lone(prefix string, n int) {
	t := k.t
	t.Helper()
	ctx := context.Background()
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		d := storekit.Digest(sha256.Sum256([]byte(key)))
		req := storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: k.principal, Session: d, FenceScope: d, Fingerprint: d,
			Owner: "owner", Now: k.now, Lease: time.Minute}
		res, err := k.s.Claim(ctx, req)
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v, %v", key, res, err)
		}
		if err := k.s.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: storekit.Succeeded,
			Attempts: 1, Outcome: []byte(`{}`), Now: k.now, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if rec, err := k.s.Get(ctx, key); err != nil || rec.State != storekit.Succeeded {
			t.Fatalf("get %s: %+v, %v", key, rec, err)
		}
		if res, err := k.s.Claim(ctx, req); err != nil || res.Claimed {
			t.Fatalf("claim %s again: %+v, %v", key, res, err)
		}
	}
}

// grow adds 20,000 settled records, with no analysis after.
func (k *keyReads) grow() {
	admin(k.t, k.url, `INSERT INTO `+k.records+` (key, tool, state, principal, fingerprint, owner, token, attempts, outcome, created, updated, expires, session, fence_scope)
		SELECT 'grown-' || i, 'send_email', 2, fingerprint, fingerprint, '', 1000000 + i, 1, '\x7b7d', created, updated, expires, sha256(('grown-' || i)::bytea), sha256(('grown-' || i)::bytea)
		FROM (SELECT fingerprint, created, updated, expires FROM `+k.records+` WHERE key = 'busy-0' OR key = 'small-0' OR key = 'quiet-0' LIMIT 1) r, generate_series(1, 20000) AS i`)
}

// Import analyses the table it grew as autovacuum would, and not while
// it is smaller than autovacuum first analyses it (migration 16): a few
// records imported into a new table leave it unanalysed, taken for ten
// pages by the planner, which finds one record by its key; hundreds
// imported into a table analysed while it held ten leave it analysed at
// its new size, so that no connection plans for a table of one page.
func TestAnImportAnalysesTheTableNotWhileItIsTiny(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Open(t)
	url := pgtest.URL(t)
	records := pgx.Identifier{s.Schema(), "records"}.Sanitize()
	admin(t, url, `ALTER TABLE `+records+` SET (autovacuum_enabled = false)`)
	now := time.Now()
	imported := 0
	importN := func(n int) float64 {
		t.Helper()
		recs := make([]storekit.Record, n)
		for i := range recs {
			key := fmt.Sprint("imported-", imported)
			imported++
			d := storekit.Digest(sha256.Sum256([]byte(key)))
			recs[i] = storekit.Record{Key: key, Tool: "send_email", State: storekit.Succeeded, Principal: d, Fingerprint: d, Session: d,
				Token: uint64(imported), Attempts: 1, Outcome: []byte(`{}`), Created: now, Updated: now, Expires: now.Add(time.Hour)}
		}
		if err := s.Import(ctx, recs); err != nil {
			t.Fatal(err)
		}
		var reltuples float64
		if err := s.Pool().QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, records).Scan(&reltuples); err != nil {
			t.Fatal(err)
		}
		return reltuples
	}
	if got := importN(10); got >= 0 {
		t.Errorf("10 records imported into a new table: analysed (reltuples %v); want it left unanalysed", got)
	}
	admin(t, url, `ANALYZE `+records)
	if got := importN(900); got != 910 {
		t.Errorf("900 records imported into a table analysed at 10: reltuples %v; want 910 (analysed)", got)
	}
}
