package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
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

// openKinds makes one open record of each kind, in sessions of their own:
// an unknown action
// and a running one (its lease lapsed by later) holding their session's
// slot (records_slot), and the same without a fence scope, as under
// FenceOff, beside their session's slot (records_beside). It returns their
// keys, sorted, and the unknown ones.
func openKinds(t *testing.T, s storekit.Store, now time.Time, principal storekit.Digest) (all, unknown []string) {
	t.Helper()
	ctx := context.Background()
	for _, k := range []struct {
		key     string
		fenced  bool
		settled bool
	}{{"unknown-in-slot", true, true}, {"unknown-apart", false, true}, {"pending-in-slot", true, false}, {"pending-apart", false, false}} {
		session := storekit.Digest(sha256.Sum256([]byte(k.key)))
		req := storekit.ClaimRequest{Key: k.key, Tool: "send_email", Principal: principal, Session: session,
			Fingerprint: session, Owner: "owner-" + k.key, Now: now, Lease: time.Minute}
		if k.fenced {
			req.FenceScope = session
		}
		res, err := s.Claim(ctx, req)
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v, %v", k.key, res, err)
		}
		all = append(all, k.key)
		if k.settled {
			if err := s.Finish(ctx, storekit.FinishRequest{Key: k.key, Token: res.Record.Token, State: storekit.Unknown,
				Attempts: 1, Now: now, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			unknown = append(unknown, k.key)
		}
	}
	slices.Sort(all)
	slices.Sort(unknown)
	return all, unknown
}

// settle fills the records table of schema with n settled records, the
// many a busy store keeps beside a few open ones, and updates the
// planner's statistics if analyze; if not, the planner has none, as after
// a restore or a major upgrade of the server until the table is analysed
// (and autovacuum is kept from analysing it).
func settle(t *testing.T, url, schema string, n int, now time.Time, principal storekit.Digest, analyze bool) {
	t.Helper()
	records := pgx.Identifier{schema, "records"}.Sanitize()
	if !analyze {
		admin(t, url, `ALTER TABLE `+records+` SET (autovacuum_enabled = false)`)
	}
	fill(t, url, schema, n, now, principal)
	if analyze {
		admin(t, url, `ANALYZE `+records)
	}
}

// fill inserts n settled records into the records table of schema, and
// nothing else: no statement that would make the server plan anew.
func fill(t *testing.T, url, schema string, n int, now time.Time, principal storekit.Digest) {
	t.Helper()
	records := pgx.Identifier{schema, "records"}.Sanitize()
	admin(t, url, `INSERT INTO `+records+` (key, tool, state, principal, fingerprint, owner, token, attempts, outcome, created, updated, expires, session, fence_scope)
		SELECT 'settled-' || i, 'send_email', 2, '\x`+hex.EncodeToString(principal[:])+`'::bytea, sha256(i::text::bytea), '', i, 1, '\x7b7d', '`+now.Format(time.RFC3339Nano)+`', '`+now.Format(time.RFC3339Nano)+`',
			'`+now.Add(24*time.Hour).Format(time.RFC3339Nano)+`', sha256(i::text::bytea), sha256(i::text::bytea)
		FROM generate_series(1, `+strconv.Itoa(n)+`) AS i`)
}

// Open records, the few a store keeps among many settled ones, are found
// through the index that holds them alone (records_open) — not by reading
// the table, nor through the fence's indexes, whatever the
// planner knows of it: analysed, or with no statistics yet (a restored
// database, or a server just upgraded, before the table is analysed). The
// listings, the count of unknown actions and the sweeper's takeover each
// find every kind, and each plan, generic or custom, reads records_open.
func TestOpenRecordsAreFoundThroughTheirIndexes(t *testing.T) {
	for _, analysed := range []bool{true, false} {
		t.Run(map[bool]string{true: "analysed", false: "before ANALYZE"}[analysed], func(t *testing.T) {
			ctx := context.Background()
			s := pgtest.Open(t)
			url := pgtest.URL(t)
			now := time.Now()
			principal := storekit.Digest(sha256.Sum256([]byte("tenant-1/ana")))
			all, unknown := openKinds(t, s, now, principal)
			settle(t, url, s.Schema(), 20000, now, principal, analysed)
			later := now.Add(2 * time.Minute) // the running ones' leases have lapsed

			listed, err := s.ListUnknown(ctx, storekit.ListRequest{Now: later})
			if err != nil || !slices.Equal(keysOf(listed), all) {
				t.Errorf("ListUnknown: %v, %v; want %v", keysOf(listed), err, all)
			}
			inScope, err := s.ListUnknown(ctx, storekit.ListRequest{Now: later, Tool: "send_email", Principal: &principal})
			if err != nil || !slices.Equal(keysOf(inScope), all) {
				t.Errorf("ListUnknown of the tool and principal: %v, %v; want %v", keysOf(inScope), err, all)
			}
			if before, err := s.ListUnknown(ctx, storekit.ListRequest{Now: now}); err != nil || !slices.Equal(keysOf(before), unknown) {
				t.Errorf("ListUnknown while the leases run: %v, %v; want %v", keysOf(before), err, unknown)
			}
			if n, err := s.CountUnknown(ctx); err != nil || n != len(unknown) {
				t.Errorf("CountUnknown: %d, %v; want %d", n, err, len(unknown))
			}

			readOpenRecordsByIndex(t, url, s, later, principal)

			taken, err := s.ClaimUnknown(ctx, storekit.ClaimUnknownRequest{Tools: []string{"send_email"}, Owner: "sweeper",
				Now: later, Lease: time.Minute, Limit: 100, UpdatedBefore: later})
			var took []storekit.Record
			for _, r := range taken {
				took = append(took, r.Record)
			}
			if got := keysOf(took); err != nil || !slices.Equal(got, all) {
				t.Errorf("ClaimUnknown: %v, %v; want %v", got, err, all)
			}
		})
	}
}

// keysOf returns the records' keys, sorted.
func keysOf(recs []storekit.Record) []string {
	var ks []string
	for _, r := range recs {
		ks = append(ks, r.Key)
	}
	slices.Sort(ks)
	return ks
}

// readOpenRecordsByIndex checks that the generic plan and the custom plan
// of each statement that reads the open records of s
// (pgstore.OpenRecordQueries) read the table through records_open alone:
// no scan of the whole table, nor of its primary key but by one key (the
// takeover's join), nor of the fence's indexes, which also hold the
// succeeded records that had a notice.
func readOpenRecordsByIndex(t *testing.T, url string, s *pgstore.Store, now time.Time, principal storekit.Digest) {
	t.Helper()
	other := regexp.MustCompile(`(?m)((Seq Scan on records|Index Scan using records_pkey on records|Bitmap Index Scan on records_pkey)$|records_slot|records_beside)`)
	for name, plan := range plans(t, url, pgstore.OpenRecordQueries(s, now, "send_email", principal[:])) {
		if !strings.Contains(plan, "records_open") || other.MatchString(plan) {
			t.Errorf("%s does not read the open records' index alone:\n%s", name, plan)
		}
	}
}

// A claim's look for the records beside its slot (the fence's: a claim
// fenced by session, of its tool and session; one fenced by principal, of
// its tool and principal, holding no slot) reads records_beside in every
// statement that makes it — the lone INSERT, the batch's, the locked
// path's reads — never the table nor its key, analysed or not: every new
// write of a fenced tool makes it.
func TestAClaimFindsTheRecordsBesideItsSlotThroughTheirIndex(t *testing.T) {
	for _, analysed := range []bool{true, false} {
		t.Run(map[bool]string{true: "analysed", false: "before ANALYZE"}[analysed], func(t *testing.T) {
			s := pgtest.Open(t)
			url := pgtest.URL(t)
			now := time.Now()
			principal := storekit.Digest(sha256.Sum256([]byte("tenant-1/ana")))
			settle(t, url, s.Schema(), 20000, now, principal, analysed)
			session := sha256.Sum256([]byte("1"))
			whole := regexp.MustCompile(`(?m)(Seq Scan on records( |$)|Index.* Scan using records_pkey on records b|records_open)`)
			for _, fence := range []string{"session", "principal"} {
				for name, plan := range plans(t, url, pgstore.BesideQueries(s, now, "send_email", principal[:], session[:], fence)) {
					if !strings.Contains(plan, "records_beside") || whole.MatchString(plan) {
						t.Errorf("%s does not read the records beside the slot through records_beside:\n%s", name, plan)
					}
				}
			}
		})
	}
}

// plans returns the generic plan and the custom plan of each of queries,
// by name and plan_cache_mode. Each is prepared and explained as EXECUTE,
// so that the generic plan is the one a prepared statement gets: EXPLAIN
// of a statement with bound arguments plans it for their values. A
// query's Before runs first, in the same transaction, as the store runs
// it.
func plans(t *testing.T, url string, queries map[string]pgstore.Query) map[string]string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	out := map[string]string{}
	for name, q := range queries {
		for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if q.Before != "" {
				if _, err := tx.Exec(ctx, q.Before); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			prepared := name + "_" + strings.TrimSuffix(mode, "_plan")
			if _, err := tx.Exec(ctx, "PREPARE "+prepared+" AS "+q.SQL); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF, SETTINGS) "+execute(t, prepared, q.Args))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			out[name+" ("+mode+")"] = strings.Join(plan, "\n")
		}
	}
	return out
}

// A group commit's batch finds the rows it writes by their keys, however
// many the table holds and whatever the planner knows of it: with no
// statistics — a new table, or one restored or upgraded and not yet
// analysed — a batch of outcomes that joined its keys to a scan of the
// whole table would read every row for each batch until autovacuum first
// analysed it; planned on a new, empty table, the join read every open
// record instead, and planned on a table analysed while it held a few
// dozen rows, all of records_pkey — and a connection kept each plan. The
// plan a batch of outcomes runs, its generic one, finds each of its rows
// through the primary key by the batch's key, and reads nothing else, in
// every case: a plan that depends on nothing the planner knows, and so is
// planned once and kept (TestABatchPlannedWhileTheTableWasSmallReadsOnlyItsRowsOnceItGrew
// runs it).
func TestABatchReadsItsRowsByKey(t *testing.T) {
	for _, c := range []struct {
		name     string
		settled  int
		analysed bool
	}{{"analysed", 20000, true}, {"before ANALYZE", 20000, false}, {"new and empty", 0, false},
		{"analysed at 10 rows", 10, true}, {"analysed at 50 rows", 50, true}} {
		t.Run(c.name, func(t *testing.T) {
			s := pgtest.Open(t)
			url := pgtest.URL(t)
			now := time.Now()
			principal := storekit.Digest(sha256.Sum256([]byte("tenant-1/ana")))
			settle(t, url, s.Schema(), c.settled, now, principal, c.analysed)
			keys := make([]string, 24)
			for i := range keys {
				keys[i] = fmt.Sprintf("batch-%d", i)
			}
			whole := regexp.MustCompile(`(?m)Seq Scan on records( |$)`)
			byKey := regexp.MustCompile(`(?m)^\s*->  Bitmap Heap Scan on records r\n\s*Recheck Cond: \(key = v\.key\)\n(.*\n)?\s*->  Bitmap Index Scan on records_pkey\n\s*Index Cond: \(key = v\.key\)$`)
			other := regexp.MustCompile(`(?m)Scan on records r|Scan using \w+ on records r`)
			for name, plan := range plans(t, url, pgstore.BatchQueries(s, now, "send_email", principal[:], principal[:], keys)) {
				if whole.MatchString(plan) {
					t.Errorf("%s reads the whole table:\n%s", name, plan)
				}
				// What throughIndexes rules out counts as a huge cost
				// where it still runs (the timeline's one row): compiled
				// (JIT) at each run, a batch of claims took 600 ms.
				if !strings.Contains(plan, "jit = 'off'") {
					t.Errorf("%s is planned with JIT compilation on:\n%s", name, plan)
				}
				// The store runs its generic plan (throughIndexes).
				if name == "finishMany (force_generic_plan)" && (!byKey.MatchString(plan) || len(other.FindAllString(plan, -1)) != 1) {
					t.Errorf("%s does not read its rows by key alone:\n%s", name, plan)
				}
			}
		})
	}
}

// execute is the EXECUTE of the prepared statement name with args.
func execute(t *testing.T, name string, args []any) string {
	t.Helper()
	if len(args) == 0 {
		return "EXECUTE " + name
	}
	lits := make([]string, len(args))
	for i, a := range args {
		lits[i] = literal(t, a)
	}
	return "EXECUTE " + name + "(" + strings.Join(lits, ", ") + ")"
}

// literal is a as an SQL literal, for an EXECUTE.
func literal(t *testing.T, a any) string {
	t.Helper()
	switch v := a.(type) {
	case time.Time:
		return "'" + v.Format(time.RFC3339Nano) + "'::timestamptz"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case int:
		return strconv.Itoa(v)
	case []byte:
		if v == nil {
			return "NULL"
		}
		return `'\x` + hex.EncodeToString(v) + `'::bytea`
	case []string:
		return array(t, v, "text")
	case [][]byte:
		return array(t, v, "bytea")
	case []time.Time:
		return array(t, v, "timestamptz")
	case []int64:
		return array(t, v, "int8")
	case []int32:
		return array(t, v, "int4")
	case []int16:
		return array(t, v, "int2")
	case []bool:
		return array(t, v, "bool")
	case int64, int32, int16, bool:
		return fmt.Sprint(v)
	}
	t.Fatalf("no literal for %T", a)
	return ""
}

// A store that began on an empty table keeps no plan made for it: once the
// table holds many rows (and the server has not analysed it since), each
// statement that its connection keeps prepared and that reads the table
// by anything but one key — a batch's outcomes, the open records' reads,
// the sweep — still finds its rows through an index. A plan made for the
// empty table read it whole: kept, it read every row at each batch until
// autovacuum first analysed the table.
func TestAStoreThatGrewKeepsNoPlanMadeForItsEmptyTable(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	// One connection: the one that runs everything, and is looked at.
	s, err := pgstore.Open(ctx, &pgstore.Options{URL: pgtest.Param(t, url, "pool_max_conns=1"), Schema: pgtest.Schema(t, url)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	principal := storekit.Digest(sha256.Sum256([]byte("tenant-1/ana")))
	admin(t, url, `ALTER TABLE `+pgx.Identifier{s.Schema(), "records"}.Sanitize()+` SET (autovacuum_enabled = false)`)

	// More runs of each than the server plans afresh before it may keep
	// a generic plan (five), on the empty table.
	for round := range 8 {
		keys := []string{fmt.Sprintf("a-%d", round), fmt.Sprintf("b-%d", round), fmt.Sprintf("c-%d", round)}
		pgstore.GatherClaims(s, len(keys), 0)
		pgstore.GatherOutcomes(s, len(keys), 0)
		var wg sync.WaitGroup
		for _, key := range keys {
			wg.Go(func() {
				session := storekit.Digest(sha256.Sum256([]byte(key)))
				res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: principal, Session: session,
					FenceScope: session, Fingerprint: session, Owner: "owner", Now: now, Lease: time.Minute})
				if err != nil || !res.Claimed {
					t.Errorf("claim %s: %+v, %v", key, res, err)
					return
				}
				if err := s.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: storekit.Succeeded,
					Attempts: 1, Now: now, TTL: time.Hour}); err != nil {
					t.Errorf("finish %s: %v", key, err)
				}
			})
		}
		wg.Wait()
		if _, err := s.ListUnknown(ctx, storekit.ListRequest{Now: now}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ListUnknown(ctx, storekit.ListRequest{Now: now, Tool: "send_email", Principal: &principal}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CountUnknown(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimUnknown(ctx, storekit.ClaimUnknownRequest{Tools: []string{"send_email"}, Owner: "sweeper",
			Now: now, Lease: time.Minute, Limit: 100, UpdatedBefore: now}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sweep(ctx, storekit.SweepRequest{Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	fill(t, url, s.Schema(), 20000, now, principal)

	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	rows, err := conn.Query(ctx, "SELECT name, statement FROM pg_prepared_statements")
	if err != nil {
		t.Fatal(err)
	}
	prepared, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Name, SQL string }])
	if err != nil {
		t.Fatal(err)
	}
	queries := pgstore.BatchQueries(s, now, "send_email", principal[:], principal[:], []string{"x", "y", "z"})
	maps.Copy(queries, pgstore.OpenRecordQueries(s, now, "send_email", principal[:]))
	whole := regexp.MustCompile(`(?m)Seq Scan on records( |$)`)
	looked := 0
	for _, p := range prepared {
		for name, q := range queries {
			if p.SQL != q.SQL {
				continue
			}
			looked++
			rows, err := conn.Query(ctx, "EXPLAIN (COSTS OFF) "+execute(t, p.Name, q.Args))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if text := strings.Join(plan, "\n"); whole.MatchString(text) {
				t.Errorf("the store's connection keeps a plan of %s that reads the whole table of %d rows:\n%s", name, 20000, text)
			}
		}
	}
	if looked == 0 {
		t.Fatalf("none of the statements looked for is prepared on the store's connection (%d are)", len(prepared))
	}
}

// array is v as an SQL array literal of type typ, NULL if v is nil.
func array[E any](t *testing.T, v []E, typ string) string {
	t.Helper()
	if v == nil {
		return "NULL::" + typ + "[]"
	}
	quoted := make([]string, len(v))
	for i, e := range v {
		quoted[i] = literal(t, e)
	}
	return "ARRAY[" + strings.Join(quoted, ", ") + "]::" + typ + "[]"
}

// A schema any earlier version left keeps its open records findable
// through the migrations since, and only them: after migrating a schema of
// each version, the listings (a read-only store's), the count of unknown
// actions and the sweeper's takeover find each pending record whose lease
// lapsed and each unknown one not approved for another attempt — in the
// slot of their session, beside it, or in a session of the version before
// sessions — and none that does not await reconciliation, of another tool
// or of another principal where they ask for one. The migrated schema has
// the indexes of a new one.
func TestMigrationKeepsEveryOpenRecordFindable(t *testing.T) {
	for version := 1; version < pgstore.Versions; version++ {
		t.Run("from version "+strconv.Itoa(version), func(t *testing.T) {
			keepsOpenRecordsFindable(t, version)
		})
	}
}

func keepsOpenRecordsFindable(t *testing.T, version int) {
	ctx := context.Background()
	url := pgtest.URL(t)
	older := pgtest.Schema(t, url)
	if _, _, err := pgstore.MigrateTo(ctx, &pgstore.Options{URL: url, Schema: older}, version); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	later := now.Add(2 * time.Minute)
	principal := storekit.Digest(sha256.Sum256([]byte("tenant-1/ana")))
	other := storekit.Digest(sha256.Sum256([]byte("tenant-2/bo")))
	records := pgx.Identifier{older, "records"}.Sanitize()
	ts := func(t time.Time) string { return "'" + t.Format(time.RFC3339Nano) + "'" }
	type kind struct {
		key, tool string
		principal storekit.Digest
		state     int
		approved  bool
		lease     time.Time // pending: lapsed by later, or not
		session   string    // its session's name, from version 2 on
		fenced    bool      // it holds its session's slot, from version 4 on
		notice    bool      // succeeded, with a notice that outlives later
		awaiting  bool      // at later
	}
	kinds := []kind{
		{key: "unknown-in-slot", state: 4, session: "s1", fenced: true, awaiting: true},
		{key: "unknown-apart", state: 4, session: "s2", awaiting: true},
		{key: "pending-in-slot", state: 1, lease: now, session: "s3", fenced: true, awaiting: true},
		{key: "pending-apart", state: 1, lease: now, session: "s4", awaiting: true},
		{key: "unknown-beside-pending", state: 4, session: "s3", awaiting: true},
		{key: "unknown-of-another-tool", tool: "charge_card", state: 4, session: "s5", fenced: true, awaiting: true},
		{key: "unknown-of-another-principal", principal: other, state: 4, session: "s6", fenced: true, awaiting: true},
		{key: "unknown-approved", state: 4, approved: true, session: "s7", fenced: true},
		{key: "pending-live", state: 1, lease: later.Add(time.Hour), session: "s8", fenced: true},
		{key: "succeeded-with-notice", state: 2, session: "s9", fenced: true, notice: true},
		{key: "failed", state: 3, session: "s10"},
	}
	for i, k := range kinds {
		if k.tool == "" {
			kinds[i].tool = "send_email"
		}
		if k.principal == (storekit.Digest{}) {
			kinds[i].principal = principal
		}
	}
	for _, k := range kinds {
		cols := `key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated, expires, retry_approved`
		lease, expires := "NULL", ts(now.Add(time.Hour))
		if k.state == 1 {
			lease, expires = ts(k.lease), "NULL"
		}
		// The record that holds a session's slot is the latest of its
		// session for migration 4, which gave the slots.
		updated := now
		if !k.fenced {
			updated = now.Add(-time.Second)
		}
		vals := `'` + k.key + `', '` + k.tool + `', ` + strconv.Itoa(k.state) + `, '\x` + hex.EncodeToString(k.principal[:]) + `'::bytea, sha256('fp'::bytea), 'owner', 1, ` +
			lease + `, 1, ` + ts(now) + `, ` + ts(updated) + `, ` + expires + `, ` + strconv.FormatBool(k.approved)
		if version >= 2 {
			cols += `, session`
			vals += `, sha256('` + k.session + `'::bytea)`
		}
		if version >= 4 {
			cols += `, fence_scope, notice_until`
			fence, notice := "NULL", "NULL"
			if k.fenced {
				fence = `sha256('` + k.session + `'::bytea)`
			}
			if k.notice {
				notice = ts(later.Add(time.Hour))
			}
			vals += `, ` + fence + `, ` + notice
		}
		admin(t, url, `INSERT INTO `+records+` (`+cols+`) VALUES (`+vals+`)`)
	}
	if _, _, err := pgstore.Migrate(ctx, &pgstore.Options{URL: url, Schema: older}); err != nil {
		t.Fatal(err)
	}
	reader, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: older, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	s, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: older, NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	want := func(of func(kind) bool) []string {
		var keys []string
		for _, k := range kinds {
			if k.awaiting && of(k) {
				keys = append(keys, k.key)
			}
		}
		slices.Sort(keys)
		return keys
	}
	mine := func(k kind) bool { return k.tool == "send_email" && k.principal == principal }
	for _, l := range []struct {
		name string
		req  storekit.ListRequest
		want []string
	}{
		{"every tool and principal", storekit.ListRequest{Now: later}, want(func(kind) bool { return true })},
		{"one principal", storekit.ListRequest{Now: later, Principal: &principal}, want(func(k kind) bool { return k.principal == principal })},
		{"one tool", storekit.ListRequest{Now: later, Tool: "send_email"}, want(func(k kind) bool { return k.tool == "send_email" })},
		{"one tool and principal", storekit.ListRequest{Now: later, Tool: "send_email", Principal: &principal}, want(mine)},
	} {
		listed, err := reader.ListUnknown(ctx, l.req)
		if err != nil || !slices.Equal(keysOf(listed), l.want) {
			t.Errorf("ListUnknown of %s after the migration: %v, %v; want %v", l.name, keysOf(listed), err, l.want)
		}
	}
	unknown := want(func(k kind) bool { return k.state == 4 })
	if n, err := reader.CountUnknown(ctx); err != nil || n != len(unknown) {
		t.Errorf("CountUnknown after the migration: %d, %v; want %d (%v)", n, err, len(unknown), unknown)
	}
	taken, err := s.ClaimUnknown(ctx, storekit.ClaimUnknownRequest{Tools: []string{"send_email"}, Principal: &principal, Owner: "sweeper",
		Now: later, Lease: time.Minute, Limit: 100, UpdatedBefore: later})
	var keys []string
	for _, c := range taken {
		keys = append(keys, c.Record.Key)
	}
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, want(mine)) {
		t.Errorf("ClaimUnknown after the migration took %v, %v; want %v", keys, err, want(mine))
	}
	fresh, _ := migrated(t, url)
	if got, want := indexes(t, url, older), indexes(t, url, fresh); !slices.Equal(got, want) {
		t.Errorf("the migrated schema's indexes:\n%s\nwant a new schema's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// indexes lists the definitions of the records table's indexes in schema,
// without the schema's name.
func indexes(t *testing.T, url, schema string) []string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT replace(indexdef, $1, 'S') FROM pg_indexes WHERE schemaname = $2 AND tablename = 'records' ORDER BY indexname`,
		schema+".", schema)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(defs) == 0 {
		t.Fatalf("indexes of %s: %v, %v", schema, defs, err)
	}
	return defs
}

// Two replicas' sweepers that take unknown actions over at once, while
// claims and outcomes of other actions go on, take each one exactly once:
// every open record of each kind is taken, by one of them.
func TestSweepersOfTwoReplicasTakeEachOpenRecordOnce(t *testing.T) {
	ctx := context.Background()
	a := pgtest.Open(t)
	url := pgtest.URL(t)
	b, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: a.Schema(), NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	now := time.Now()
	principal := storekit.Digest(sha256.Sum256([]byte("tenant-1/ana")))
	const n = 240
	for i := range n {
		key := "open-" + strconv.Itoa(i)
		session := storekit.Digest(sha256.Sum256([]byte(key)))
		req := storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: principal, Session: session,
			Fingerprint: session, Owner: "crashed", Now: now, Lease: time.Minute}
		switch i % 3 {
		case 0: // the session's slot
			req.FenceScope = session
		case 1: // the principal's slot, one per tool: a tool of its own
			req.FenceScope, req.Tool = principal, "send_email_"+strconv.Itoa(i)
		} // 2: FenceOff
		res, err := a.Claim(ctx, req)
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v, %v", key, res, err)
		}
		if i%2 == 0 { // unknown; the others stay pending, their lease lapsed by later
			if err := a.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: storekit.Unknown,
				Attempts: 1, Now: now, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
	}
	settle(t, url, a.Schema(), 5000, now, principal, true)
	later := now.Add(2 * time.Minute)
	var tools []string
	for i := range n {
		if i%3 == 1 {
			tools = append(tools, "send_email_"+strconv.Itoa(i))
		}
	}
	tools = append(tools, "send_email")

	stop := make(chan struct{})
	busy := make(chan error, 1)
	go func() { // claims and outcomes of other actions meanwhile, on both replicas
		defer close(busy)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s := []*pgstore.Store{a, b}[i%2]
			key := "busy-" + strconv.Itoa(i)
			session := storekit.Digest(sha256.Sum256([]byte("busy")))
			res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: principal, Session: session,
				Fingerprint: session, Owner: "busy", Now: later, Lease: time.Minute, FenceScope: session})
			if err != nil || !res.Claimed {
				busy <- fmt.Errorf("claim %s: %+v, %v", key, res, err)
				return
			}
			if err := s.Finish(ctx, storekit.FinishRequest{Key: key, Token: res.Record.Token, State: storekit.Succeeded,
				Attempts: 1, Now: later, TTL: time.Hour}); err != nil {
				busy <- err
				return
			}
		}
	}()
	taken := make(chan []string, 4)
	for i := range 4 {
		s := []*pgstore.Store{a, b}[i%2]
		go func() {
			var mine []string
			defer func() { taken <- mine }()
			for {
				got, err := s.ClaimUnknown(ctx, storekit.ClaimUnknownRequest{Tools: tools, Owner: "sweeper-" + strconv.Itoa(i),
					Now: later, Lease: time.Hour, Limit: 7, UpdatedBefore: later})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				for _, r := range got {
					mine = append(mine, r.Record.Key)
				}
			}
		}()
	}
	var all []string
	for range 4 {
		all = append(all, <-taken...)
	}
	close(stop)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	slices.Sort(all)
	if len(all) != n || len(slices.Compact(slices.Clone(all))) != n {
		t.Errorf("the sweepers took %d records, %d of them distinct; want each of the %d open records once", len(all), len(slices.Compact(slices.Clone(all))), n)
	}
	if left, err := a.ListUnknown(ctx, storekit.ListRequest{Now: later}); err != nil || len(left) != 0 {
		t.Errorf("awaiting reconciliation after the sweep: %d records, %v; want none", len(left), err)
	}
}
