package pgstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// TestOutage stops PostgreSQL in the middle of a run: the tool is not run
// while the database is down (store_unavailable), nothing recorded before is
// lost, and calls succeed again once it is back.
func TestOutage(t *testing.T) {
	pgtest.URL(t) // skipped, loudly, without PostgreSQL
	srv := pgtest.StartServer(t)
	ctx := context.Background()
	store, err := pgstore.Open(ctx, &pgstore.Options{URL: pgtest.Param(t, srv.URL(), "connect_timeout=2")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var runs atomic.Int64
	tool, err := agenttool.New("send_email", "Send an email.", func(ctx context.Context, in struct {
		To string `json:"to"`
	}) (string, error) {
		runs.Add(1)
		return "sent to " + in.To, nil
	}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, SettledByOperators: true, StoreTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	scope := agenttool.WithScope(ctx, "tenant-1", "outage")
	call := func(i int) envelope.Envelope {
		cctx, cancel := context.WithTimeout(scope, 20*time.Second)
		defer cancel()
		return tool.Invoke(cctx, fmt.Sprintf(`{"to":"user%d@example.com"}`, i))
	}

	for i := range 5 {
		if env := call(i); env.Status != envelope.Success {
			t.Fatalf("before the outage: %s", env)
		}
	}
	srv.Stop()
	for i := 5; i < 10; i++ {
		env := call(i)
		if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeStoreUnavailable || env.Next != envelope.Wait {
			t.Fatalf("during the outage: %s; want store_unavailable", env)
		}
	}
	if runs.Load() != 5 {
		t.Fatalf("the tool ran %d times; during the outage it must not run", runs.Load())
	}
	srv.Start()
	deadline := time.Now().Add(30 * time.Second)
	for i := range 10 {
		env := call(i)
		for env.Status != envelope.Success && env.Error.Code == envelope.CodeStoreUnavailable && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // the pool reconnects
			env = call(i)
		}
		if env.Status != envelope.Success {
			t.Fatalf("after the outage, action %d: %s", i, env)
		}
		if replayed := i < 5; env.Replayed != replayed {
			t.Errorf("action %d replayed=%v, want %v: the records from before the outage must survive it", i, env.Replayed, replayed)
		}
	}
	if runs.Load() != 10 {
		t.Errorf("the tool ran %d times in all, want 10", runs.Load())
	}
}

// dest is a destination that records effects by request reference and can
// be searched by it (a reconcilable one).
type dest struct {
	mu   sync.Mutex
	refs map[string]int
}

func (d *dest) do(ref string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refs[ref]++
}

func (d *dest) count(ref string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refs[ref]
}

func (d *dest) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.refs {
		n += c
	}
	return n
}

// terminator kills every backend of the store's application_name.
func terminator(t *testing.T, url, app string) func() int {
	admin, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	var mu sync.Mutex
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		var n int
		admin.QueryRow(context.Background(),
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n)
		return n
	}
}

// Backends killed mid-call never make an envelope lie, never give an action
// two effects, and never hang a call.
//
// The store's connections are killed (pg_terminate_backend) while calls
// run: in the middle of a tool's effect, and over and over during a burst.
// No envelope may lie (success ⇒ exactly one effect, definite_failure ⇒
// none), no action may have two effects, and every call must end.
func TestOutage_TerminatedBackendsNeverMakeAnEnvelopeLie(t *testing.T) {
	t.Run("terminate", func(t *testing.T) { terminateMidCall(t, "") })
	// A statement_timeout short enough that some claims, renewals and
	// finishes are cancelled by the server, with the killing on top.
	t.Run("statement_timeout", func(t *testing.T) { terminateMidCall(t, "&options=-c%20statement_timeout%3D3") })
}

func terminateMidCall(t *testing.T, extra string) {
	url := pgtest.URL(t)
	app := fmt.Sprintf("killed_%d", time.Now().UnixNano())
	surl := pgtest.Param(t, url, "application_name="+app+extra)
	schema := pgtest.Schema(t, url)
	migrated, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	migrated.Close()
	var store *pgstore.Store
	for range 50 { // opening may itself time out under statement_timeout
		if store, err = pgstore.Open(context.Background(), &pgstore.Options{URL: surl, Schema: schema}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	kill := terminator(t, url, app)
	d := &dest{refs: map[string]int{}}
	var killDuring atomic.Bool
	type in struct {
		To string `json:"to"`
	}
	tool, err := agenttool.New("send_email", "Send.", func(ctx context.Context, x in) (string, error) {
		d.do(agenttool.RequestRef(ctx))
		if killDuring.Load() {
			kill()
		}
		return "sent", nil
	}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, StoreTimeout: 3 * time.Second, Lease: 2 * time.Second,
		ClockSkew: -1, AttemptTimeout: time.Second,
		Reconciler: reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
			if d.count(ref) > 0 {
				return reconcile.AppliedWith([]byte(`"sent"`))
			}
			return reconcile.NotAppliedYet()
		})})
	if err != nil {
		t.Fatal(err)
	}
	check := func(label string, env envelope.Envelope) {
		t.Helper()
		n := d.count(env.RequestRef)
		switch {
		case n > 1:
			t.Errorf("%s: %d effects for %s: %s", label, n, env.RequestRef, env)
		case env.Status == envelope.Success && n != 1:
			t.Errorf("%s: success with %d effects: %s", label, n, env)
		case env.Status == envelope.DefiniteFailure && env.Earlier == nil && n != 0 &&
			!(env.Error != nil && env.Error.Code == envelope.CodeStoreUnavailable && env.Attempts == 0):
			// store_unavailable (I4) says only that this call ran nothing: it
			// cannot read what earlier calls did.
			t.Errorf("%s: definite_failure with %d effects: %s", label, n, env)
		}
	}

	// 1. The backends die while the tool runs.
	ctx := agenttool.WithScope(context.Background(), "tenant-1", "s-mid")
	killDuring.Store(true)
	for i := range 5 {
		env := tool.Invoke(ctx, fmt.Sprintf(`{"to":"mid%d@example.com"}`, i))
		t.Logf("mid %d: %s", i, env)
		check("mid", env)
	}
	killDuring.Store(false)
	time.Sleep(2500 * time.Millisecond) // the leases (2s) that killed calls left lapse on the wall clock; orders nothing
	for i := range 5 {
		env := tool.Invoke(ctx, fmt.Sprintf(`{"to":"mid%d@example.com"}`, i))
		t.Logf("mid again %d: %s", i, env)
		check("mid again", env)
	}

	// 2. A burst of calls while a goroutine keeps killing the backends.
	stop := make(chan struct{})
	var killer sync.WaitGroup
	killer.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
				kill()
			}
		}
	})
	var wg sync.WaitGroup
	envs := make([]envelope.Envelope, 60)
	for i := range envs {
		wg.Go(func() {
			c := agenttool.WithScope(context.Background(), "tenant-1", fmt.Sprintf("s-burst-%d", i%6))
			cctx, cancel := context.WithTimeout(c, 30*time.Second)
			defer cancel()
			envs[i] = tool.Invoke(cctx, fmt.Sprintf(`{"to":"b%d@example.com"}`, i%20))
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("calls hang while backends are killed")
	}
	close(stop)
	killer.Wait()
	for i, env := range envs {
		check(fmt.Sprintf("burst %d", i), env)
	}
	// After the storm, leases lapse; every action settles to one effect.
	time.Sleep(2500 * time.Millisecond) // the leases (2s) lapse on the wall clock; orders nothing
	op, _ := agenttool.NewOperator(store, tool)
	if _, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{}); err != nil {
		t.Logf("sweep (an error is expected under statement_timeout): %v", err)
	}
	for i := range 20 {
		for s := range 6 {
			c := agenttool.WithScope(context.Background(), "tenant-1", fmt.Sprintf("s-burst-%d", s))
			env := tool.Invoke(c, fmt.Sprintf(`{"to":"b%d@example.com"}`, i))
			check("after", env)
		}
	}
	left, err := op.Unknown(context.Background(), "", 100)
	t.Logf("effects %d; still unknown after the storm: %d (%v)", d.total(), len(left), err)
}
