package dbostool_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	neturl "net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/dbostool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// TestMain gives the tests a PostgreSQL (pgtest.Main).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// bound bounds every wait of a test on DBOS: a launch, a workflow's result.
const bound = time.Minute

// testDB is one test's database, as an application's would be: DBOS's
// tables in its schema (dbos), retrysafe's in the store's, and the fake
// destination's effects in public.
type testDB struct {
	url  string
	pool *pgxpool.Pool
}

// newDB creates a database for the test, dropped when it ends (after every
// DBOS context and store the test opens is closed).
func newDB(t *testing.T) *testDB {
	t.Helper()
	admin := pgtest.URL(t)
	b := make([]byte, 6)
	rand.Read(b)
	name := "dbostool_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		if conn, err := pgx.Connect(ctx, admin); err == nil {
			conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			conn.Close(ctx)
		}
	})
	u, err := neturl.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	db := openDB(t, u.String())
	if _, err := db.pool.Exec(ctx, `CREATE TABLE effects (seq bigserial PRIMARY KEY, ref text NOT NULL, deduped bool NOT NULL);
		CREATE UNIQUE INDEX effects_ref ON effects (ref) WHERE deduped`); err != nil {
		t.Fatal(err)
	}
	return db
}

// openDB connects to a test's database made by newDB (in this process or
// the parent).
func openDB(t *testing.T, url string) *testDB {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &testDB{url: url, pool: pool}
}

// send is the fake destination: it applies one effect for ref and keeps
// it durably. A Keyed destination does it once per reference, and says
// when it replayed an earlier request; any other, once per request.
func (db *testDB) send(ctx context.Context, ref string, keyed bool) (seq int64, replayed bool, err error) {
	if !keyed {
		err = db.pool.QueryRow(ctx, `INSERT INTO effects (ref, deduped) VALUES ($1, false) RETURNING seq`, ref).Scan(&seq)
		return seq, false, err
	}
	err = db.pool.QueryRow(ctx, `INSERT INTO effects (ref, deduped) VALUES ($1, true) ON CONFLICT (ref) WHERE deduped DO NOTHING RETURNING seq`, ref).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		err = db.pool.QueryRow(ctx, `SELECT seq FROM effects WHERE ref = $1`, ref).Scan(&seq)
		return seq, true, err
	}
	return seq, false, err
}

// effects returns how many effects the destination holds, for every
// reference.
func (db *testDB) effects(t *testing.T) int {
	t.Helper()
	var n int
	if err := db.pool.QueryRow(context.Background(), `SELECT count(*) FROM effects`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// store opens the test's retrysafe store in the test's database.
func (db *testDB) store(t *testing.T, schema string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(context.Background(), &pgstore.Options{URL: db.url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

type sent struct {
	Seq int64 `json:"seq"`
}

const (
	toAna  = `{"to":"ana@example.com","subject":"Invoice 42"}`
	toBeto = `{"to":"beto@example.com","subject":"Invoice 43"}`
	toCaio = `{"to":"caio@example.com","subject":"Invoice 44"}`
)

// mailer is a guarded send_email over the test's destination, with the
// faults a test asks for. Its counters are safe for concurrent use.
type mailer struct {
	db    *testDB
	class agenttool.Class
	// silent: the destination cannot be asked (its reconciler answers
	// pending, whatever it holds).
	silent bool

	calls atomic.Int32 // guarded calls (Invoke), as the Start hook counts them
	runs  atomic.Int32 // runs of the tool's function

	lost  atomic.Int32 // the next so many runs act, then lose their reply
	downs atomic.Int32 // the next so many runs fail before acting (transient)
	// before, if set, runs first in every run of the tool's function; an
	// error it returns is the run's.
	before func(ctx context.Context, in email) error
	// acted, if set, is called after the effect, before the reply.
	acted func(ref string, in email)
}

// errLostReply is a reply lost after the request was sent.
var errLostReply = envelope.MarkUnknown(errors.New("connection reset after the request was sent"))

func (m *mailer) run(ctx context.Context, in email) (sent, error) {
	m.runs.Add(1)
	if m.before != nil {
		if err := m.before(ctx, in); err != nil {
			return sent{}, err
		}
	}
	if m.downs.Add(-1) >= 0 {
		return sent{}, envelope.MarkTransient(errors.New("503 service unavailable"))
	}
	ref := agenttool.RequestRef(ctx)
	seq, replayed, err := m.db.send(ctx, ref, m.class == agenttool.Keyed)
	if err != nil {
		return sent{}, envelope.MarkTransient(err)
	}
	if replayed {
		agenttool.DestinationReplayed(ctx)
	}
	if m.acted != nil {
		m.acted(ref, in)
	}
	if m.lost.Add(-1) >= 0 {
		return sent{}, errLostReply
	}
	return sent{Seq: seq}, nil
}

// check is the destination's answer about ref, for a Reconcilable mailer.
func (m *mailer) check(ctx context.Context, ref string) reconcile.Answer {
	if m.silent {
		return reconcile.StillPending()
	}
	var seq int64
	err := m.db.pool.QueryRow(ctx, `SELECT seq FROM effects WHERE ref = $1`, ref).Scan(&seq)
	switch {
	case err == nil:
		b, _ := json.Marshal(sent{Seq: seq})
		return reconcile.AppliedWith(b)
	case !errors.Is(err, pgx.ErrNoRows):
		return reconcile.CantSayBecause(err)
	}
	return reconcile.NotAppliedYet()
}

// Lease and WaitTimeout of the tests' tools: short, so that a step run
// again after a crash outwaits the dead process's lease quickly; and
// WaitTimeout at least Lease plus ClockSkew, as New requires of a tool
// that owns its retries.
const (
	testLease = time.Second
	testWait  = 3 * time.Second
)

// tool builds the guarded tool over store. o's zero fields take the tests'
// defaults: the mailer's class, a short lease, quick retries.
func (m *mailer) tool(t *testing.T, store agenttool.Store, o agenttool.Options) *agenttool.Tool {
	t.Helper()
	o.Store, o.Class = store, m.class
	if o.Lease == 0 {
		o.Lease = testLease
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = testWait
	}
	if o.Retry.InitialInterval == 0 {
		o.Retry.InitialInterval = 10 * time.Millisecond
	}
	if m.class == agenttool.Reconcilable {
		o.Reconciler = reconcile.Func(m.check)
	}
	o.Hooks.Start = func(ctx context.Context, _ agenttool.StartEvent) context.Context {
		m.calls.Add(1)
		return ctx
	}
	tool, err := agenttool.New("send_email", "Send an email.", m.run, o)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// step builds the Step of tool, or fails the test.
func step(t *testing.T, tool *agenttool.Tool, o *dbostool.Options) *dbostool.Step {
	t.Helper()
	s, err := dbostool.New(tool, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// job is a workflow's input: who acts (from trusted code), the model's
// arguments, and the conversation, if any.
type job struct {
	User    string `json:"user"`
	Args    string `json:"args"`
	Session string `json:"session,omitempty"`
}

// sendOnce returns the workflow that sends one email through s: one line.
func sendOnce(s *dbostool.Step) dbos.Workflow[job, envelope.Envelope] {
	return func(ctx dbos.Context, in job) (envelope.Envelope, error) {
		return s.Run(ctx, dbostool.Call{Principal: in.User, Args: in.Args, Session: in.Session})
	}
}

// launch starts DBOS on url with the workflows register registers, and
// shuts it down when the test ends. Every launch of a test's database
// is one application: the same name and version, so that a later launch
// recovers what an earlier one left pending.
func launch(t *testing.T, url string, register func(dbos.Context)) dbos.Context {
	t.Helper()
	ctx, err := dbos.NewContext(context.Background(), dbos.Config{
		AppName:                "dbostool-test",
		ApplicationVersion:     "dbostool-test",
		DatabaseURL:            url,
		Logger:                 slog.New(slog.DiscardHandler),
		SystemDBStartupTimeout: bound,
	})
	if err != nil {
		t.Fatal(err)
	}
	register(ctx)
	if err := dbos.Launch(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dbos.Shutdown(ctx, 10*time.Second) })
	return ctx
}

// result waits, at most bound, for the result of the workflow id.
func result(t *testing.T, ctx dbos.Context, id string) (envelope.Envelope, error) {
	t.Helper()
	h, err := dbos.RetrieveWorkflow[envelope.Envelope](ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return h.GetResult(dbos.WithHandleTimeout(bound))
}

// run starts workflow wf with input in under id and waits for its result.
func run[P any](t *testing.T, ctx dbos.Context, wf dbos.Workflow[P, envelope.Envelope], in P, id string) envelope.Envelope {
	t.Helper()
	h, err := dbos.RunWorkflow(ctx, wf, in, dbos.WithWorkflowID(id))
	if err != nil {
		t.Fatal(err)
	}
	env, err := h.GetResult(dbos.WithHandleTimeout(bound))
	if err != nil {
		t.Fatalf("workflow %s: %v", id, err)
	}
	return env
}

// code is an envelope in a word: its status, and its error code if any.
func code(env envelope.Envelope) string {
	if env.Error != nil {
		return string(env.Status) + "/" + env.Error.Code
	}
	return string(env.Status)
}

// asJSON is an envelope's JSON form, to compare two.
func asJSON(t *testing.T, env envelope.Envelope) string {
	t.Helper()
	b, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
