package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/internal/testproc"
)

// TestMain runs this test binary as the retrysafe command when asked to,
// so that tests run the command as a real process.
func TestMain(m *testing.M) {
	if os.Getenv("RETRYSAFE_TEST_AS_AIRLINE") == "1" { // a server the guard command starts
		stdioAirline()
	}
	if os.Getenv("RETRYSAFE_TEST_AS_COMMAND") == "1" {
		main()
	}
	os.Exit(pgtest.Main(m))
}

// result is what one run of the command printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// command runs retrysafe as a process with args, and env added to its
// environment (DATABASE_URL is unset unless env sets it).
func command(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, not a timing
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(withoutDatabaseURL(os.Environ()), "RETRYSAFE_TEST_AS_COMMAND=1"), env...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errs.String()}
}

// inProcess runs the command as command does, in this process: the same
// run as main's, with less load on the machine than a process would add.
func inProcess(t *testing.T, env []string, args ...string) result {
	t.Helper()
	t.Setenv("DATABASE_URL", "") // restored when the test ends
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		os.Setenv(k, v)
	}
	defer os.Setenv("DATABASE_URL", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, not a timing
	defer cancel()
	var out, errs bytes.Buffer
	code := run(ctx, args, &out, &errs)
	return result{code, out.String(), errs.String()}
}

func withoutDatabaseURL(env []string) []string {
	var kept []string
	for _, e := range env {
		if !strings.HasPrefix(e, "DATABASE_URL=") {
			kept = append(kept, e)
		}
	}
	return kept
}

func (r result) exits(t *testing.T, code int, says ...string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range says {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not say %q:\n%s", s, r.stderr)
		}
	}
	return r
}

func (r result) ok(t *testing.T) result {
	t.Helper()
	return r.exits(t, opcmd.ExitOK)
}

// app is the application whose store the command reads: a send_email tool
// whose mail server loses replies while lose is set, and the emails it sent.
type app struct {
	store agenttool.Store
	email *agenttool.Tool
	lose  bool
	sent  map[string]int
}

func newApp(t *testing.T, store agenttool.Store) *app {
	t.Helper()
	a := &app{store: store, sent: map[string]int{}}
	var err error
	a.email, err = agenttool.New("send_email", "Send an email.", func(ctx context.Context, in struct {
		To string `json:"to"`
	}) (string, error) {
		if a.lose { // the request never reaches the server
			return "", errors.New("read tcp 127.0.0.1:25: connection reset by peer")
		}
		a.sent[agenttool.RequestRef(ctx)]++
		return "sent", nil
	}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, SettledByOperators: true, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *app) send(principal, label, to string) envelope.Envelope {
	ctx := agenttool.WithLabel(agenttool.WithScope(context.Background(), principal, "conversation-"+to), label)
	return a.email.Invoke(ctx, `{"to":"`+to+`"}`)
}

// landed waits until the lost emails' attempts can no longer land, as
// the command counts it: it knows no tool's AttemptTimeout, and waits
// ClockSkew (1s) after an attempt ended before it takes a finding of not
// applied.
func landed() { time.Sleep(1100 * time.Millisecond) }

// lostEmails leaves the application's bbolt file at path with two unknown
// emails, Ana's and Ben's, and closes it, as an application that stopped.
func lostEmails(t *testing.T, path string) (ana, ben envelope.Envelope) {
	t.Helper()
	store, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a := newApp(t, store)
	a.lose = true
	ana, ben = a.send("tenant-1/ana", "Ana Lima (ticket 4512)", "ana@example.com"), a.send("tenant-2/ben", "Ben Okafor", "ben@example.com")
	if ana.Status != envelope.UnknownOutcome || ben.Status != envelope.UnknownOutcome {
		t.Fatalf("lost emails: %s, %s", ana, ben)
	}
	return ana, ben
}

// The command reads a bbolt file the application left — without changing
// it — and settles its records as the application's tools then find them.
func TestCommandOnABoltFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	ana, ben := lostEmails(t, path)
	before, _ := os.ReadFile(path)

	out := command(t, nil, "-db", path, "list").ok(t).stdout
	if !strings.HasPrefix(out, "REFERENCE") || !strings.Contains(out, ana.RequestRef+"  send_email  unknown  1 ") ||
		!strings.Contains(out, "Ana Lima (ticket 4512)") || !strings.Contains(out, "Ben Okafor") {
		t.Errorf("list:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(inProcess(t, nil, "-db", path, "list", "-json", "-principal", "tenant-1/ana").ok(t).stdout), "\n")
	var rec map[string]any
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil || rec["ref"] != ana.RequestRef || rec["label"] != "Ana Lima (ticket 4512)" || rec["attempts"] != 1.0 {
		t.Errorf("list -json -principal tenant-1/ana: %q", lines)
	}
	if show := inProcess(t, nil, "-db", path, "show", ben.RequestRef).ok(t).stdout; !strings.Contains(show, "label       Ben Okafor") ||
		!strings.Contains(show, `"status": "unknown_outcome"`) {
		t.Errorf("show:\n%s", show)
	}
	if stats := inProcess(t, nil, "-db", path, "-json", "stats").ok(t).stdout; stats != `{"tool":"send_email","state":"unknown","records":2}`+"\n" {
		t.Errorf("stats -json: %q", stats)
	}
	inProcess(t, nil, "-db", path, "show", "send_email/nosuchreference").exits(t, opcmd.ExitNotFound)
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("reading the store changed the file")
	}

	for _, args := range [][]string{
		{"reconcile", ana.RequestRef, "-by", "maria"},
		{"sweep", "-once"},
		{"approve", ana.RequestRef, "-compensate", "-attempts", "1", "-by", "maria", "-why", "cancelled"},
	} {
		inProcess(t, nil, append([]string{"-db", path}, args...)...).exits(t, opcmd.ExitUsage, "run it from the application's mount of package agenttool/opcmd")
	}

	inProcess(t, nil, "-db", path, "resolve", "not-applied", ana.RequestRef, "-attempts", "2", "-by", "maria", "-why", "not in the log").
		exits(t, opcmd.ExitStale, "Nothing was settled")
	landed()
	command(t, nil, "-db", path, "resolve", "not-applied", ana.RequestRef, "-attempts", "1", "-by", "maria", "-why", "not in the log").ok(t)
	inProcess(t, nil, "-db", path, "resolve", "applied", ben.RequestRef, "-attempts", "1", "-result", `"sent"`, "-by", "maria", "-why", "in the log").ok(t)
	inProcess(t, nil, "-db", path, "resolve", "applied", ben.RequestRef, "-attempts", "1", "-by", "maria", "-why", "twice").exits(t, opcmd.ExitNotUnknown)

	store, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a := newApp(t, store)
	if env := a.send("tenant-1/ana", "", "ana@example.com"); env.Status != envelope.Success || a.sent[ana.RequestRef] != 1 {
		t.Errorf("Ana's email after resolve not-applied: %s; sent %d times, want once", env, a.sent[ana.RequestRef])
	}
	if env := a.send("tenant-2/ben", "", "ben@example.com"); !env.Replayed || string(env.Result) != `"sent"` || a.sent[ben.RequestRef] != 0 {
		t.Errorf("Ben's email after resolve applied: %s; sent %d times, want none", env, a.sent[ben.RequestRef])
	}
}

// TestHelperHoldsTheStore is not a test: it is the application, in a
// process of its own, holding the bbolt file open for writing.
func TestHelperHoldsTheStore(t *testing.T) {
	path := os.Getenv("RETRYSAFE_TEST_HOLD")
	if path == "" {
		t.Skip("a helper process for TestCommandWhileTheApplicationHoldsTheFile")
	}
	store, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	os.Stdout.WriteString("holding\n")
	time.Sleep(testproc.Lifetime) // killed by the test long before
}

// While the application holds the file, the command says so plainly, and
// where the commands can run instead; once it stops, the command works.
func TestCommandWhileTheApplicationHoldsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	ana, _ := lostEmails(t, path)
	holder := testproc.Start(t, "TestHelperHoldsTheStore", "RETRYSAFE_TEST_HOLD="+path)
	for holder.Lines.Scan() && holder.Lines.Text() != "holding" {
	}
	if holder.Lines.Err() != nil || holder.Lines.Text() != "holding" {
		holder.Kill()
		t.Fatalf("the helper process did not open the store: %s", holder.Stderr)
	}

	command(t, nil, "-db", path, "list").exits(t, opcmd.ExitFailed,
		"is open in another process, which holds it for writing", "Run the operator commands inside that application (package agenttool/opcmd")
	command(t, nil, "-db", path, "resolve", "not-applied", ana.RequestRef, "-attempts", "1", "-by", "maria", "-why", "w").
		exits(t, opcmd.ExitFailed, "is locked by another process")

	holder.Kill()
	inProcess(t, nil, "-db", path, "list").ok(t)
}

// TestHelperDiesMidCall is not a test: it is the application, in a process
// of its own, in the middle of a call when the test kills it.
func TestHelperDiesMidCall(t *testing.T) {
	path := os.Getenv("RETRYSAFE_TEST_CALL")
	if path == "" {
		t.Skip("a helper process for TestCommandAfterTheApplicationDied")
	}
	store, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	email, err := agenttool.New("send_email", "Send an email.", func(ctx context.Context, in struct {
		To string `json:"to"`
	}) (string, error) {
		os.Stdout.WriteString("sending\n")
		time.Sleep(testproc.Lifetime) // killed here
		return "", nil
	}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, SettledByOperators: true, Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := agenttool.WithLabel(agenttool.WithScope(context.Background(), "tenant-1/ana", "conversation-sam@example.com"), "Ana Lima")
	email.Invoke(ctx, `{"to":"sam@example.com"}`)
}

// The application died in the middle of a call: once the call's lease has
// lapsed, list shows the action pending with its lapsed lease and the dead
// call's attempt counted, and resolve not-applied with that count lets the
// restarted application send it once.
func TestCommandAfterTheApplicationDied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	lostEmails(t, path) // the application's store, with two lost emails already
	proc := testproc.Start(t, "TestHelperDiesMidCall", "RETRYSAFE_TEST_CALL="+path)
	var said []string
	for proc.Lines.Scan() && proc.Lines.Text() != "sending" {
		said = append(said, proc.Lines.Text())
	}
	if proc.Lines.Text() != "sending" {
		proc.Kill()
		t.Fatalf("the helper process did not call the tool:\n%s\n%s", strings.Join(said, "\n"), proc.Stderr)
	}
	proc.Kill()

	var dead map[string]any
	deadline := time.Now().Add(30 * time.Second) // a bound on the 300ms lease, not a timing
	for ; dead == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out := inProcess(t, nil, "-db", path, "-json", "list", "-principal", "tenant-1/ana").ok(t).stdout
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["state"] == "pending" {
				dead = rec
			}
		}
	}
	if dead == nil || dead["lease_lapsed"] != true || dead["attempts"] != 1.0 || dead["label"] != "Ana Lima" {
		t.Fatalf("the dead call's record: %v", dead)
	}
	ref := dead["ref"].(string)
	if out := inProcess(t, nil, "-db", path, "list").ok(t).stdout; !strings.Contains(out, ref+"  send_email  pending (lapsed)  1 ") {
		t.Errorf("list:\n%s", out)
	}
	landed()
	inProcess(t, nil, "-db", path, "resolve", "not-applied", ref, "-attempts", "1", "-by", "maria", "-why", "not in the log").ok(t)

	store, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a := newApp(t, store)
	if env := a.send("tenant-1/ana", "", "sam@example.com"); env.Status != envelope.Success || env.RequestRef != ref || a.sent[ref] != 1 {
		t.Errorf("the restarted application's call: %s; sent %d times, want once", env, a.sent[ref])
	}
}

// The store's flags may follow the command, where kubectl and docker
// users type them: retrysafe stats -db FILE.
func TestGlobalFlagsAfterTheCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	ana, _ := lostEmails(t, path)
	want := `{"tool":"send_email","state":"unknown","records":2}` + "\n"
	for _, args := range [][]string{
		{"stats", "-db", path, "-json"},
		{"-json", "stats", "-db", path},
		{"stats", "-json", "-db=" + path},
	} {
		if got := inProcess(t, nil, args...).ok(t).stdout; got != want {
			t.Errorf("%q: %q, want %q", args, got, want)
		}
	}
	if show := inProcess(t, nil, "show", ana.RequestRef, "-db", path).ok(t).stdout; !strings.Contains(show, ana.RequestRef) {
		t.Errorf("show REF -db PATH:\n%s", show)
	}
	inProcess(t, nil, "list", "-principal", "tenant-1/ana", "-db").exits(t, opcmd.ExitUsage, "flag needs an argument: -db")
}

// Without a store, or with two, the command says how to name one.
func TestCommandNamesItsStore(t *testing.T) {
	inProcess(t, nil, "list").exits(t, opcmd.ExitUsage, "name the store: -db PATH (bbolt) or -database-url URL")
	inProcess(t, nil, "-db", "x.db", "-database-url", "postgres://localhost/x", "list").exits(t, opcmd.ExitUsage, "not both")
	inProcess(t, nil, "-db", filepath.Join(t.TempDir(), "missing.db"), "list").exits(t, opcmd.ExitFailed, "no store to open read-only")
	help := inProcess(t, nil, "help").ok(t).stdout
	for _, want := range []string{"Usage: retrysafe", "-db PATH", "-database-url URL", "-schema SCHEMA", "-key-ttl DURATION", "(default 24h0m0s)",
		"resolve not-applied REF -attempts N", "Not here: it needs the application's tools", "migrate\n      Create the PostgreSQL store's schema"} {
		if !strings.Contains(help, want) {
			t.Errorf("help does not say %q:\n%s", want, help)
		}
	}
}

// On PostgreSQL, named by -database-url or by DATABASE_URL.
func TestCommandOnPostgreSQL(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.Schema(t, url)
	store, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a := newApp(t, store)
	a.lose = true
	ana := a.send("tenant-1/ana", "Ana Lima", "ana@example.com")
	a.lose = false

	if out := command(t, nil, "-database-url", url, "-schema", schema, "list").ok(t).stdout; !strings.Contains(out, ana.RequestRef+"  send_email  unknown  1 ") ||
		!strings.Contains(out, "Ana Lima") {
		t.Errorf("list:\n%s", out)
	}
	env := []string{"DATABASE_URL=" + url}
	landed()
	inProcess(t, env, "-schema", schema, "resolve", "not-applied", ana.RequestRef, "-attempts", "1", "-by", "maria", "-why", "not in the log").ok(t)
	if out := inProcess(t, env, "-schema", schema, "-json", "stats").ok(t).stdout; out != `{"tool":"send_email","state":"unknown","retry_approved":true,"records":1}`+"\n" {
		t.Errorf("stats -json: %q", out)
	}
	if env := a.send("tenant-1/ana", "", "ana@example.com"); env.Status != envelope.Success || a.sent[ana.RequestRef] != 1 {
		t.Errorf("the next call: %s; sent %d times", env, a.sent[ana.RequestRef])
	}
}

// schemaVersion reads whether schema exists and its latest migration (-1
// without a migrations table), as the test's administrator.
func schemaVersion(t *testing.T, url, schema string) (exists bool, version int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	version = -1
	var table bool
	conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", schema+".migrations").Scan(&table)
	if table {
		conn.QueryRow(ctx, "SELECT COALESCE(max(version), 0) FROM "+pgx.Identifier{schema, "migrations"}.Sanitize()).Scan(&version)
	}
	return exists, version
}

// On PostgreSQL, the read-only commands run under a role that may only
// read (USAGE on the schema, SELECT on its records and migrations: the
// grants of docs/stores.md), on a store opened read-only. A settling
// command under that role is refused, says that the role lacks a right and
// where the grants are, and changes nothing; under a role with the grants
// docs/stores.md lists for settling, it settles.
func TestReadOnlyCommandsRunUnderARoleThatMayOnlyRead(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.Schema(t, url)
	store, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a := newApp(t, store)
	a.lose = true
	ana := a.send("tenant-1/ana", "Ana Lima", "ana@example.com")
	a.lose = false
	q := pgx.Identifier{schema}.Sanitize()
	reader := pgtest.Role(t, url, "GRANT USAGE ON SCHEMA "+q+" TO {role}", "GRANT SELECT ON "+q+".records, "+q+".migrations TO {role}")
	settler := pgtest.Role(t, url, "GRANT USAGE ON SCHEMA "+q+" TO {role}", "GRANT SELECT, INSERT, UPDATE ON "+q+".records TO {role}",
		"GRANT SELECT ON "+q+".migrations TO {role}", "GRANT USAGE ON SEQUENCE "+q+".tokens TO {role}")

	as := func(role string, args ...string) result {
		return inProcess(t, nil, append([]string{"-database-url", role, "-schema", schema}, args...)...)
	}
	if out := as(reader, "list").ok(t).stdout; !strings.Contains(out, ana.RequestRef+"  send_email  unknown  1 ") {
		t.Errorf("list under the reading role:\n%s", out)
	}
	if out := as(reader, "show", ana.RequestRef).ok(t).stdout; !strings.Contains(out, "state       unknown") {
		t.Errorf("show under the reading role:\n%s", out)
	}
	if out := as(reader, "-json", "stats").ok(t).stdout; out != `{"tool":"send_email","state":"unknown","records":1}`+"\n" {
		t.Errorf("stats under the reading role: %q", out)
	}
	as(reader, "resolve", "not-applied", ana.RequestRef, "-attempts", "1", "-by", "maria", "-why", "not in the log").
		exits(t, opcmd.ExitFailed, "permission denied", "the database role lacks a right this needs; docs/stores.md lists the grants")
	if rec, err := store.Get(context.Background(), ana.RequestRef); err != nil || rec.State != agenttool.Unknown || rec.RetryApproved || rec.Resolution != nil {
		t.Fatalf("a refused settlement changed the record: %+v, %v", rec, err)
	}
	landed()
	as(settler, "resolve", "not-applied", ana.RequestRef, "-attempts", "1", "-by", "maria", "-why", "not in the log").ok(t)
	if env := a.send("tenant-1/ana", "", "ana@example.com"); env.Status != envelope.Success || a.sent[ana.RequestRef] != 1 {
		t.Errorf("the next call after the settlement: %s; sent %d times", env, a.sent[ana.RequestRef])
	}
}

// No command but migrate creates or changes a schema: a mistyped -schema is
// refused (it used to be created, and listed as empty), and so is a schema
// an older application left (it used to be upgraded under it); both are
// left as they were. migrate creates a schema, and says when there is
// nothing to do (pgstore's tests migrate older schemas).
func TestOnlyMigrateChangesASchema(t *testing.T) {
	url := pgtest.URL(t)
	env := []string{"DATABASE_URL=" + url}
	mistyped := pgtest.Schema(t, url)
	for _, args := range [][]string{{"list"}, {"stats"}, {"show", "send_email/x"}, {"resolve", "applied", "send_email/x", "-attempts", "1", "-by", "maria", "-why", "w"}} {
		inProcess(t, env, append([]string{"-schema", mistyped}, args...)...).exits(t, opcmd.ExitFailed, "does not exist in this database", "check its name")
	}
	if exists, _ := schemaVersion(t, url, mistyped); exists {
		t.Fatalf("a command created the schema %s", mistyped)
	}

	out := inProcess(t, env, "-schema", mistyped, "migrate").ok(t).stdout
	_, current := schemaVersion(t, url, mistyped)
	if want := "Schema " + mistyped + " migrated from version 0 to "; !strings.HasPrefix(out, want) || current < 1 {
		t.Errorf("migrate of a new schema: %q, version %d", out, current)
	}
	if out := inProcess(t, env, "-schema", mistyped, "migrate").ok(t).stdout; !strings.Contains(out, "already: nothing to do") {
		t.Errorf("migrate again: %q", out)
	}
	// The schema of an older application: one migration behind.
	older := pgtest.Schema(t, url)
	inProcess(t, env, "-schema", older, "migrate").ok(t)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	mig := pgx.Identifier{older, "migrations"}.Sanitize()
	if _, err := conn.Exec(context.Background(), "DELETE FROM "+mig+" WHERE version = (SELECT max(version) FROM "+mig+")"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"list"}, {"resolve", "applied", "send_email/x", "-attempts", "1", "-by", "maria", "-why", "w"}} {
		inProcess(t, env, append([]string{"-schema", older}, args...)...).exits(t, opcmd.ExitFailed, "is at version", "This command does not upgrade the schema")
	}
	if _, v := schemaVersion(t, url, older); v != current-1 {
		t.Errorf("a command changed the older schema to version %d", v)
	}
	fresh := pgtest.Schema(t, url)
	if o := inProcess(t, env, "-schema", fresh, "-json", "migrate").ok(t).stdout; o != fmt.Sprintf(`{"schema":%q,"from":0,"to":%d}`+"\n", fresh, current) {
		t.Errorf("migrate -json of a new schema: %q", o)
	}
	inProcess(t, nil, "-db", filepath.Join(t.TempDir(), "app.db"), "migrate").exits(t, opcmd.ExitUsage, "migrate is for PostgreSQL")
}
