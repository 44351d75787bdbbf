package pgstore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// The grants of docs/stores.md, for the schema {schema} and the role {role}.
var (
	// applicationGrants are what an application needs once the schema is
	// migrated: rights on the tables and the sequence, nothing else.
	applicationGrants = []string{
		"GRANT USAGE ON SCHEMA {schema} TO {role}",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.records TO {role}",
		"GRANT SELECT ON {schema}.migrations TO {role}",
		"GRANT USAGE ON SEQUENCE {schema}.tokens TO {role}",
	}
	// readerGrants are what the operator command's list, show and stats
	// need.
	readerGrants = []string{
		"GRANT USAGE ON SCHEMA {schema} TO {role}",
		"GRANT SELECT ON {schema}.records, {schema}.migrations TO {role}",
	}
)

func grants(schema string, gs []string) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = strings.ReplaceAll(g, "{schema}", pgx.Identifier{schema}.Sanitize())
	}
	return out
}

// admin runs statements as the test's administrator.
func admin(t *testing.T, url string, sql ...string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range sql {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// schemaState reads whether schema exists and its latest migration (-1
// without a migrations table).
func schemaState(t *testing.T, url, schema string) (exists bool, version int) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	ctx := context.Background()
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	version = -1
	var table bool
	conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", schema+".migrations").Scan(&table)
	if table {
		if err := conn.QueryRow(ctx, "SELECT COALESCE(max(version), 0) FROM "+pgx.Identifier{schema, "migrations"}.Sanitize()).Scan(&version); err != nil {
			t.Fatal(err)
		}
	}
	return exists, version
}

// migrated returns a fresh schema migrated by Migrate, and its version.
func migrated(t *testing.T, url string) (string, int) {
	t.Helper()
	schema := pgtest.Schema(t, url)
	from, to, err := pgstore.Migrate(context.Background(), &pgstore.Options{URL: url, Schema: schema})
	if err != nil || from != 0 || to < 1 {
		t.Fatalf("Migrate of a new schema: from %d to %d, %v", from, to, err)
	}
	if from, again, err := pgstore.Migrate(context.Background(), &pgstore.Options{URL: url, Schema: schema}); err != nil || from != to || again != to {
		t.Fatalf("Migrate again: from %d to %d, %v; want %d to %d", from, again, err, to, to)
	}
	return schema, to
}

// olderSchema returns a fresh schema as the version of this package before
// the latest migration left it.
func olderSchema(t *testing.T, url string) string {
	t.Helper()
	schema := pgtest.Schema(t, url)
	if _, _, err := pgstore.MigrateTo(context.Background(), &pgstore.Options{URL: url, Schema: schema}, pgstore.Versions-1); err != nil {
		t.Fatal(err)
	}
	return schema
}

// Migrate brings a schema an older version left to this package's version,
// keeping its records; a store opened without migrating then works.
func TestMigrateUpgradesAnOlderSchema(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	older := olderSchema(t, url)
	if _, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: older, NoMigrate: true}); !errors.Is(err, pgstore.ErrSchemaOlder) {
		t.Fatalf("Open of the older schema without migrating: %v", err)
	}
	from, to, err := pgstore.Migrate(ctx, &pgstore.Options{URL: url, Schema: older})
	if err != nil || from != pgstore.Versions-1 || to != pgstore.Versions {
		t.Fatalf("Migrate of the older schema: from %d to %d, %v; want %d to %d", from, to, err, pgstore.Versions-1, pgstore.Versions)
	}
	s, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: older, NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exercise(t, s)
}

// Open with NoMigrate or ReadOnly never creates or changes a schema: a
// missing one (a name mistyped), one older than this package (left by an
// older application) and one newer are refused with an error that says
// which and what to do, and left as they were.
func TestOpenWithoutMigratingChangesNoSchema(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	current, version := migrated(t, url)
	older := olderSchema(t, url)
	newer, _ := migrated(t, url)
	admin(t, url, "INSERT INTO "+pgx.Identifier{newer, "migrations"}.Sanitize()+" (version) SELECT max(version) + 1 FROM "+pgx.Identifier{newer, "migrations"}.Sanitize())
	missing := pgtest.Schema(t, url)
	empty := pgtest.Schema(t, url)
	admin(t, url, "CREATE SCHEMA "+pgx.Identifier{empty}.Sanitize())

	for _, mode := range []pgstore.Options{{NoMigrate: true}, {ReadOnly: true}} {
		for _, tt := range []struct {
			schema string
			want   error
			says   string
		}{
			{missing, pgstore.ErrNoSchema, "does not exist in this database"},
			{empty, pgstore.ErrNoSchema, "has no retrysafe tables"},
			{older, pgstore.ErrSchemaOlder, "run the migration first (pgstore.Migrate, or retrysafe migrate)"},
			{newer, pgstore.ErrSchemaNewer, "use the version of retrysafe that migrated it"},
		} {
			existed, before := schemaState(t, url, tt.schema)
			o := mode
			o.URL, o.Schema = url, tt.schema
			s, err := pgstore.Open(ctx, &o)
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), tt.schema) {
				t.Errorf("NoMigrate %v, ReadOnly %v, schema %s: %v; want %v saying %q", mode.NoMigrate, mode.ReadOnly, tt.schema, err, tt.want, tt.says)
			}
			if exists, after := schemaState(t, url, tt.schema); exists != existed || after != before {
				t.Errorf("a refused Open changed schema %s: exists %v → %v, version %d → %d", tt.schema, existed, exists, before, after)
			}
		}
		o := mode
		o.URL, o.Schema = url, current
		s, err := pgstore.Open(ctx, &o)
		if err != nil {
			t.Fatalf("NoMigrate %v, ReadOnly %v: Open of a schema at version %d: %v", mode.NoMigrate, mode.ReadOnly, version, err)
		}
		s.Close()
	}
	// Without NoMigrate, a newer schema is refused too.
	if _, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: newer}); !errors.Is(err, pgstore.ErrSchemaNewer) {
		t.Errorf("Open of a newer schema: %v", err)
	}
}

// A guarded tool on s: a success, an unknown outcome, a sweep and an
// operator's settlement.
func exercise(t *testing.T, s *pgstore.Store) {
	t.Helper()
	lose := true
	tool, err := agenttool.New("send_email", "", func(context.Context, struct {
		To string `json:"to"`
	}) (string, error) {
		if lose {
			lose = false
			return "", errors.New("read: connection reset by peer")
		}
		return "sent", nil
	}, agenttool.Options{Store: s, Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{MaxAttempts: 1},
		ClockSkew: -1}) // one process, one clock: a person may settle the lost call at once
	if err != nil {
		t.Fatal(err)
	}
	ctx := agenttool.WithScope(context.Background(), "tenant-1/ana", "conversation-1")
	lost := tool.Invoke(ctx, `{"to":"ana@example.com"}`)
	if lost.Status != envelope.UnknownOutcome {
		t.Fatalf("the lost call: %s", lost)
	}
	op, err := agenttool.NewOperator(s, tool)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.ResolveNotApplied(context.Background(), lost.RequestRef, lost.Attempts, "maria", "not in the log"); err != nil {
		t.Fatalf("settling: %v", err)
	}
	if env := tool.Invoke(ctx, `{"to":"ana@example.com"}`); env.Status != envelope.Success {
		t.Fatalf("the approved retry: %s", env)
	}
	if _, err := s.Sweep(context.Background(), storekit.SweepRequest{Now: time.Now().Add(48 * time.Hour)}); err != nil {
		t.Fatalf("sweeping: %v", err)
	}
}

// Once an administrator has migrated the schema (Migrate), the application
// runs under a role with rights on its tables and sequence alone, as
// docs/stores.md lists them: Open (migrating or not) reads the schema's
// version and changes nothing, calls claim, record, settle and sweep. When
// the schema needs a migration, Open under that role says that it may not
// run it, and leaves the schema as it was.
func TestApplicationRunsUnderARoleWithRightsOnTheTablesOnly(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	schema, _ := migrated(t, url)
	app := pgtest.Role(t, url, grants(schema, applicationGrants)...)
	for _, noMigrate := range []bool{false, true} {
		s, err := pgstore.Open(ctx, &pgstore.Options{URL: app, Schema: schema, NoMigrate: noMigrate})
		if err != nil {
			t.Fatalf("Open under the application's role (NoMigrate %v): %v", noMigrate, err)
		}
		exercise(t, s)
		s.Close()
	}

	older := olderSchema(t, url)
	_, before := schemaState(t, url, older)
	app = pgtest.Role(t, url, grants(older, applicationGrants)...)
	if _, err := pgstore.Open(ctx, &pgstore.Options{URL: app, Schema: older}); err == nil || !strings.Contains(err.Error(), "this role may not create or change the schema") {
		t.Errorf("Open of an older schema under the application's role: %v", err)
	}
	if _, after := schemaState(t, url, older); after != before {
		t.Errorf("the refused migration left version %d, was %d", after, before)
	}
}

// ReadOnly opens a store under a role that may only read (docs/stores.md):
// what operators read works, and a write is refused by the database itself
// and changes nothing.
func TestReadOnlyOpenReadsUnderARoleThatMayOnlyRead(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	schema, _ := migrated(t, url)
	writer, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	exercise(t, writer)
	if _, err := writer.Claim(ctx, storekit.ClaimRequest{Key: "send_email/y", Tool: "send_email", Owner: "o", Now: time.Now(), Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	reader := pgtest.Role(t, url, grants(schema, readerGrants)...)
	for _, as := range []string{url, reader} {
		s, err := pgstore.Open(ctx, &pgstore.Options{URL: as, Schema: schema, ReadOnly: true})
		if err != nil {
			t.Fatalf("a read-only Open: %v", err)
		}
		op, err := agenttool.NewOperator(s)
		if err != nil {
			t.Fatal(err)
		}
		if counts, err := op.Stats(ctx); err != nil || len(counts) == 0 {
			t.Errorf("Stats of a read-only store: %v, %v", counts, err)
		}
		if _, err := op.Unknown(ctx, "", 10); err != nil {
			t.Errorf("Unknown of a read-only store: %v", err)
		}
		_, err = s.Claim(ctx, storekit.ClaimRequest{Key: "send_email/x", Tool: "send_email", Owner: "o", Now: time.Now(), Lease: time.Minute})
		if err == nil || !(strings.Contains(err.Error(), "read-only") || strings.Contains(err.Error(), "lacks a right")) {
			t.Errorf("a claim on a read-only store: %v; want it refused", err)
		}
		s.Close()
	}
	if _, err := writer.Get(ctx, "send_email/x"); !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("the refused claim left a record: %v", err)
	}
}

// I9 across Migrate, for a principal-wide fence: an action an older
// version left unknown keeps every new write of its tool and principal
// from running, in any session, on every replica.
//
// The older version's records have no fence scope; migration 4 gives the
// newest open record of each tool and session its session's slot. A tool
// fenced by principal asks for its principal's slot, which nothing holds.
func TestMigrateKeepsAPrincipalWideFence(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	sent := 0
	tool := func(s *pgstore.Store, fence agenttool.FenceScope) *agenttool.Tool {
		tool, err := agenttool.New("send_email", "", func(context.Context, struct {
			To string `json:"to"`
		}) (string, error) {
			if sent++; sent == 1 {
				return "", errors.New("read: connection reset by peer")
			}
			return "sent", nil
		}, agenttool.Options{Store: s, Class: agenttool.AtMostOnce, Fence: fence, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return tool
	}
	// The older version's records: unknown, no fence scope.
	current := pgtest.Open(t)
	lost := tool(current, agenttool.FenceOff).Invoke(agenttool.WithScope(ctx, "tenant-1/ana", "conversation-1"), `{"to":"ana@example.com"}`)
	if lost.Status != envelope.UnknownOutcome {
		t.Fatalf("the lost call: %s", lost)
	}
	older := olderSchema(t, url)
	admin(t, url, `INSERT INTO `+older+`.records (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, outcome,
		created, updated, expires, retry_approved, resolution, session, taken_over, label)
		SELECT key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, outcome,
		created, updated, expires, retry_approved, resolution, session, taken_over, label FROM `+current.Schema()+`.records`)
	if _, _, err := pgstore.Migrate(ctx, &pgstore.Options{URL: url, Schema: older}); err != nil {
		t.Fatal(err)
	}
	for _, session := range []string{"conversation-1", "conversation-2"} {
		s, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: older})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		env := tool(s, agenttool.FencePrincipal).Invoke(agenttool.WithScope(ctx, "tenant-1/ana", session), `{"to":"bob@example.com"}`)
		if env.Error == nil || env.Error.Code != envelope.CodeEarlierUnknown {
			t.Errorf("a new email of the principal in %s while %s is unknown: %s; want earlier_action_unknown", session, lost.RequestRef, env)
		}
	}
	if sent != 1 {
		t.Errorf("the principal's emails ran %d times while the first one is unknown; want 1", sent)
	}
}

// The replicas of the version before keep working on the migrated schema
// until they are replaced (docs/stores.md, Roles and grants), and keep the
// promises meanwhile. A record this version marks until its model is told
// keeps its own lifetime apart (migration 14); a replica of version 13
// sweeps by expires alone, and must not delete it while the mark lasts —
// or the write it holds back runs again. (Found reviewing d8e66dd, which
// had expires hold the lifetime alone: version 13's sweep deleted the
// record, and its model's resend ran again.)
func TestAReplicaOfTheVersionBeforeKeepsAMarkOnTheMigratedSchema(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	schema := pgtest.Schema(t, url)
	s, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Now().UTC().Truncate(time.Second)
	alice, s9 := agenttool.Digest{0xa1}, agenttool.Digest{0x59, 9}
	approvedAndMarked(t, s, storekit.ClaimRequest{Key: "C", Tool: "send_email", Principal: alice, Session: s9, Fingerprint: agenttool.Digest{1},
		Owner: "o", Now: t0, Lease: time.Minute, FenceScope: alice, NoticeHold: 10 * time.Second})
	// A replica of version 13 sweeps, two hours later: its statement, word
	// for word, on the migrated schema.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tbl := pgx.Identifier{schema, "records"}.Sanitize()
	oldSweep := `DELETE FROM ` + tbl + ` WHERE (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
			AND key IN (SELECT key FROM ` + tbl + ` WHERE expires IS NOT NULL AND expires <= $1
			AND (state IN (2, 3) OR (state = 4 AND retry_approved)) ORDER BY expires LIMIT $2 FOR UPDATE SKIP LOCKED)`
	if _, err := conn.Exec(ctx, oldSweep, t0.Add(2*time.Hour), 50); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, "C"); err != nil {
		t.Errorf("C, approved and marked (its model not told of the action it stands in for), after a sweep of a replica of the version before: %v; want kept while its mark lasts", err)
	} else if !rec.AwaitsNotice(t0.Add(2 * time.Hour)) {
		t.Errorf("C: mark %v; want unheard", rec.NoticeUntil)
	}
	// Its model sends C again: held back by the mark, and told — not run.
	again, err := s.Claim(ctx, storekit.ClaimRequest{Key: "C", Tool: "send_email", Principal: alice, Session: s9, Fingerprint: agenttool.Digest{1},
		Owner: "o2", Now: t0.Add(2 * time.Hour), Lease: time.Minute, FenceScope: alice, NoticeHold: 10 * time.Second})
	if err != nil || again.Claimed || again.Blocked == nil {
		t.Errorf("C sent again by its model, its mark unheard: claimed %v (expired %v), blocked by %+v, %v; want held back by its mark (claimed, C's action runs a second time)", again.Claimed, again.Expired, again.Blocked, err)
	}
}

// Migration 14 keeps a record's own lifetime apart from when it may go.
// A record the version before marked until its model is told had its
// lifetime overwritten with 2262, and kept it once told: migrated, it is
// given the longest lifetime of its tool's settled records, and goes once
// that and its mark have ended; one still untold stays. A row that a
// replica of the version before writes afterwards (its lifetime left
// behind) is read by its expires, which that replica keeps no shorter.
func TestMigrationGivesAMarkKeptUntil2262ItsToolsLifetime(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	schema := pgtest.Schema(t, url)
	if _, _, err := pgstore.MigrateTo(ctx, &pgstore.Options{URL: url, Schema: schema}, 13); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Second).Add(-48 * time.Hour)
	tbl := pgx.Identifier{schema, "records"}.Sanitize()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(key string, state int, expires, notice time.Time, approved bool) {
		t.Helper()
		var n *time.Time
		if !notice.IsZero() {
			n = &notice
		}
		d := sha256.Sum256([]byte(key))
		exec(`INSERT INTO `+tbl+` (key, tool, state, principal, fingerprint, owner, token, attempts, created, updated, expires, retry_approved, notice_until, stands_for, session)
			VALUES ($1, 'send_email', $2, $3, $3, '', 1, 1, $4, $4, $5, $6, $7, $8, $3)`, key, state, d[:], t0, expires, approved, n, map[bool]string{true: "send_email/A"}[n != nil])
	}
	insert("settled", 2, t0.Add(time.Hour), time.Time{}, false)
	insert("told", 4, storekit.UntilTold, t0.Add(2*time.Hour), true)
	insert("untold", 4, storekit.UntilTold, storekit.UntilTold, true)
	if _, _, err := pgstore.Migrate(ctx, &pgstore.Options{URL: url, Schema: schema}); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for key, want := range map[string]time.Time{"told": t0.Add(2 * time.Hour), "untold": storekit.UntilTold} {
		if rec, err := s.Get(ctx, key); err != nil || !rec.Expires.Equal(t0.Add(time.Hour)) || !rec.SweepAt().Equal(want) {
			t.Errorf("%s, migrated: expires %v, swept from %v, %v; want its tool's lifetime (%v), swept from %v", key, rec.Expires, rec.SweepAt(), err, t0.Add(time.Hour), want)
		}
	}
	if _, err := storekit.SweepAll(ctx, s, t0.Add(2*time.Hour), 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "told"); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("told, once its lifetime and its mark ended: %v; want swept", err)
	}
	if rec, err := s.Get(ctx, "untold"); err != nil || !rec.AwaitsNotice(t0.Add(2*time.Hour)) {
		t.Errorf("untold, its mark unheard: %v; want kept", err)
	}
	// A replica of the version before settles it afresh: its expires, its
	// updated; the lifetime this version wrote is left behind.
	later := t0.Add(3 * time.Hour)
	exec(`UPDATE `+tbl+` SET state = 2, updated = $1, expires = $2, notice_until = NULL, stands_for = '' WHERE key = 'untold'`, later, later.Add(5*time.Hour))
	if rec, err := s.Get(ctx, "untold"); err != nil || !rec.Expires.Equal(later.Add(5*time.Hour)) {
		t.Errorf("settled by a replica of the version before: expires %v, %v; want the expires it wrote, %v", rec.Expires, err, later.Add(5*time.Hour))
	}
}

// A replica of the version before, still running on the migrated schema
// during a rolling upgrade, closes a marked record as replaced: as that
// version did, it moves the record's expires to its mark's end (2262)
// with a new updated, and leaves lifetime behind. Once the record's model
// is told and the mark ends (this version), the record must go when its
// own lifetime has ended — not be kept until 2262: migration 14 repaired
// only the rows it found when it ran, and the claim that tells the mark
// gives such a record its tool's lifetime (storekit.ClaimRequest.KeyTTL).
// (Found reviewing 2e23fbe.)
func TestAReplicaOfTheVersionBeforeLeavesNoRecordKeptUntil2262(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	schema := pgtest.Schema(t, url)
	s, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Now().UTC().Truncate(time.Second)
	alice, s9, s10 := agenttool.Digest{0xa1}, agenttool.Digest{0x59, 9}, agenttool.Digest{0x59, 10}
	req := func(key string, session agenttool.Digest, now time.Time) storekit.ClaimRequest {
		return storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: alice, Session: session, Fingerprint: agenttool.Digest{1},
			Owner: "o-" + key, Now: now, Lease: time.Minute, FenceScope: alice, NoticeHold: 10 * time.Second, KeyTTL: time.Hour}
	}
	approvedAndMarked(t, s, req("C", s9, t0))
	// A replica of version 13 claims X (conversation 10) in C's place: it
	// closes C as its DecideClaim did (expires moved to the mark's end),
	// writes it with its update (no lifetime), and inserts X.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tbl := pgx.Identifier{schema, "records"}.Sanitize()
	at := t0.Add(2 * time.Second)
	fp := agenttool.Digest{1}
	if _, err := conn.Exec(ctx, `UPDATE `+tbl+` SET state = 3, replaced_by = 'X', owner = '', lease_expiry = NULL, input = NULL, taken_over = false,
		retry_approved = false, outcome = '{"replaced":true}', updated = $1, expires = notice_until WHERE key = 'C'`, at); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+tbl+` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated, session, fence_scope, replaces, definition)
		VALUES ('X', 'send_email', 1, $1, $2, 'o-X', nextval('`+schema+`.tokens'), $3, 1, $4, $4, $5, $1, 'C', 0)`,
		alice[:], fp[:], at.Add(time.Minute), at, s10[:]); err != nil {
		t.Fatal(err)
	}
	x, err := s.Get(ctx, "X")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: "X", Token: x.Token, State: agenttool.Failed, Attempts: 1, Now: t0.Add(3 * time.Second), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// This version: conversation 9's next write is held back by C's mark
	// and told; its following one, after NoticeHold, ends the mark.
	d, err := s.Claim(ctx, req("D", s9, t0.Add(time.Minute)))
	if err != nil || d.Claimed || d.Blocked == nil || d.Blocked.Key != "C" {
		t.Fatalf("conversation 9's next write: claimed %v, blocked by %+v, %v; want held back by C's mark", d.Claimed, d.Blocked, err)
	}
	e, err := s.Claim(ctx, req("E", s9, t0.Add(2*time.Minute)))
	if err != nil || !e.Claimed {
		t.Fatalf("conversation 9's write after the notice: claimed %v, blocked by %+v, %v", e.Claimed, e.Blocked, err)
	}
	if rec, err := s.Get(ctx, "C"); err != nil || !rec.NoticeUntil.IsZero() {
		t.Fatalf("C after a claim past its notice: mark %v, %v; want ended", rec.NoticeUntil, err)
	}
	if _, err := storekit.SweepAll(ctx, s, t0.Add(24*time.Hour), 0, nil); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, "C"); err == nil {
		t.Errorf("C a day after its mark ended and its hour-long lifetime: kept (expires %v, swept from %v); want swept, not kept until 2262", rec.Expires, rec.SweepAt())
	}
}

// approvedAndMarked claims c, finds its action not applied and approves it
// for one more attempt (for an hour), and marks it, a second later, as
// standing in for send_email/A, until its model is told.
func approvedAndMarked(t *testing.T, s *pgstore.Store, c storekit.ClaimRequest) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Claim(ctx, c)
	if err != nil || !res.Claimed {
		t.Fatal(res, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: c.Key, Token: res.Record.Token, State: agenttool.Unknown, Attempts: 1, Now: c.Now, RetryApproved: true, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mark(ctx, storekit.MarkRequest{Key: c.Key, Session: c.Session, Until: storekit.UntilTold, For: "send_email/A", Now: c.Now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
}
