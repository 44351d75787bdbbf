package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// pair is a primary and its streaming standby, and a connection string
// that names both and takes whichever takes writes, as an application
// behind a failover does (target_session_attrs=read-write).
type pair struct {
	primary, standby *pgtest.Server
}

func newPair(t *testing.T) *pair {
	t.Helper()
	if testing.Short() {
		t.Skip("starts two PostgreSQL servers")
	}
	p := &pair{primary: pgtest.StartServer(t)}
	p.standby = p.primary.Standby(t)
	return p
}

// url names both servers, with the schema's user and extra parameters.
func (p *pair) url(t *testing.T, params ...string) string {
	t.Helper()
	u, err := url.Parse(p.primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", p.primary.Port(), p.standby.Port())
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	q.Set("connect_timeout", "2")
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// as is p.url with the user of roleURL.
func (p *pair) as(t *testing.T, roleURL string) string {
	t.Helper()
	r, err := url.Parse(roleURL)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(p.url(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = r.User
	return u.String()
}

// caughtUp waits until the standby has replayed what the primary wrote.
func (p *pair) caughtUp(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pc, err := pgx.Connect(ctx, p.primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(ctx)
	var lsn string
	if err := pc.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	sc, err := pgx.Connect(ctx, p.standby.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(ctx)
	for {
		var done bool
		if err := sc.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("the standby did not catch up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failOver kills the primary, as a machine that dies, and promotes the
// standby.
func (p *pair) failOver(t *testing.T) {
	t.Helper()
	p.primary.Kill(t)
	p.standby.Promote(t)
}

func claimReq(key string, now time.Time, unkeyed bool) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: key, Tool: "pay", Principal: storekit.Digest{1}, Session: storekit.Digest{2},
		Fingerprint: storekit.Digest{3}, Owner: "o-" + key, Now: now, Lease: time.Minute, Unkeyed: unkeyed}
}

// A fencing token is never handed out twice, across a promotion too: the
// claims of the old primary's last moments, which the standby never
// received, had tokens the new primary must not hand out again, or a
// paused holder's late request would pass a destination's token check.
func TestTokensAreNeverHandedOutTwiceAcrossAPromotion(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	store, err := pgstore.Open(ctx, &pgstore.Options{URL: p.url(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	seen := map[uint64]string{}
	var highest uint64
	claim := func(key string) uint64 {
		t.Helper()
		res, err := store.Claim(ctx, claimReq(key, time.Now(), false))
		if err != nil {
			t.Fatalf("claim %s: %v", key, err)
		}
		if !res.Claimed {
			t.Fatalf("claim %s: not granted: %+v", key, res)
		}
		tok := res.Record.Token
		if other, ok := seen[tok]; ok {
			t.Fatalf("token %d handed out twice: to %s and to %s", tok, other, key)
		}
		seen[tok] = key
		return tok
	}
	for i := range 20 {
		claim(fmt.Sprintf("pay/before-%d", i))
	}
	p.caughtUp(t)
	p.primary.PauseSender(t)
	for i := range 200 {
		highest = max(highest, claim(fmt.Sprintf("pay/unreplicated-%d", i)))
	}
	before := p.primary.Timeline(t)
	p.failOver(t)
	if after := p.standby.Timeline(t); after <= before {
		t.Fatalf("timeline %d after the promotion, %d before", after, before)
	}
	for i := range 50 {
		key := fmt.Sprintf("pay/after-%d", i)
		var tok uint64
		for attempt := 0; ; attempt++ { // the pool reconnects to the new primary
			res, err := store.Claim(ctx, claimReq(key, time.Now(), false))
			if err == nil {
				tok = res.Record.Token
				break
			}
			if attempt > 100 {
				t.Fatalf("claim %s on the new primary: %v", key, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if tok <= highest {
			t.Fatalf("token %d handed out on the new timeline; the old one handed out up to %d", tok, highest)
		}
		if other, ok := seen[tok]; ok {
			t.Fatalf("token %d handed out twice: to %s and to %s", tok, other, key)
		}
		seen[tok] = key
	}
	r, err := store.Replication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeline != r.Recorded || r.Noticed.IsZero() {
		t.Errorf("replication %+v: want the new timeline recorded, and when it was noticed", r)
	}
	// A reconcilable claim of an unreplicated key on the new primary is
	// not granted as new within the failover window: its record may have
	// been lost, and the destination is asked first.
	req := claimReq("pay/unreplicated-7", time.Now(), true)
	req.TakeOver = true
	res, err := store.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Lost || !res.TookOver || !res.Claimed || res.HeldUntil.IsZero() {
		t.Errorf("claim of a key the failover lost: %+v; want it taken over as lost, held until the failover was noticed", res)
	}
}

// destination keeps the effects of the failover test's tools, by request
// reference, and which phase made each.
type destination struct {
	mu      sync.Mutex
	effects map[string][]int // ref → the phases of its effects
	at      map[string][]int64
	phase   atomic.Int32
	clock   atomic.Int64 // orders effects and answers
}

func (d *destination) apply(ref string, dedupe bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dedupe && len(d.effects[ref]) > 0 {
		return
	}
	d.effects[ref] = append(d.effects[ref], int(d.phase.Load()))
	if d.at == nil {
		d.at = map[string][]int64{}
	}
	d.at[ref] = append(d.at[ref], d.clock.Add(1))
}

// doneBefore reports whether ref had an effect before tick.
func (d *destination) doneBefore(ref string, tick int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, at := range d.at[ref] {
		if at < tick {
			return true
		}
	}
	return false
}

func (d *destination) of(ref string) []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.effects[ref])
}

type chargeInput struct {
	ID int `json:"id"`
}

// appReplica is one process of the application: its store and its tools,
// one of each class.
type appReplica struct {
	store *pgstore.Store
	tools map[string]*agenttool.Tool
}

func openAppReplica(t *testing.T, url string, dest *destination, opts pgstore.Options) *appReplica {
	t.Helper()
	opts.URL, opts.NoMigrate = url, true
	store, err := pgstore.Open(context.Background(), &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	r := &appReplica{store: store, tools: map[string]*agenttool.Tool{}}
	act := func(dedupe bool) func(context.Context, chargeInput) (string, error) {
		return func(ctx context.Context, in chargeInput) (string, error) {
			ref := agenttool.RequestRef(ctx)
			dest.apply(ref, dedupe)
			return ref, nil
		}
	}
	check := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		if len(dest.of(ref)) > 0 {
			return reconcile.AppliedWith([]byte(`"` + ref + `"`))
		}
		return reconcile.NotAppliedYet()
	})
	base := agenttool.Options{Store: store, Lease: 2 * time.Second, WaitTimeout: 50 * time.Millisecond,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
	for name, o := range map[string]agenttool.Options{
		"charge":  {Class: agenttool.AtMostOnce},
		"book":    {Class: agenttool.Reconcilable, Reconciler: check},
		"invoice": {Class: agenttool.Keyed},
	} {
		o.Store, o.Lease, o.WaitTimeout, o.Retry = base.Store, base.Lease, base.WaitTimeout, base.Retry
		tool, err := agenttool.New(name, "A test action.", act(name == "invoice"), o)
		if err != nil {
			t.Fatal(err)
		}
		r.tools[name] = tool
	}
	return r
}

// failoverAction is one logical action of the failover test, and what its calls
// answered.
type failoverAction struct {
	tool string
	id   int
	ref  string
	envs []envelope.Envelope
	ends []int64 // the destination's clock when each call answered
	dest *destination
}

func (a *failoverAction) call(r *appReplica, timeout time.Duration) envelope.Envelope {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ctx = agenttool.WithScope(ctx, "tenant-1", fmt.Sprintf("conversation-%d", a.id))
	env := r.tools[a.tool].Invoke(ctx, fmt.Sprintf(`{"id":%d}`, a.id))
	a.ref = env.RequestRef
	a.envs = append(a.envs, env)
	if a.dest != nil {
		a.ends = append(a.ends, a.dest.clock.Add(1))
	}
	return env
}

// At most one effect per action, and envelopes that never lie, across a
// failover to a promoted standby: several replicas of the application
// call actions of every class while the standby falls behind (its WAL
// sender paused), the primary dies (SIGKILL), the standby is promoted,
// and every action is called again — by the replicas that were running,
// whose pools reconnect to the new primary, and by one restarted across
// the failover — as agents retrying after errors do.
func TestOneEffectPerActionAcrossAFailover(t *testing.T) {
	for _, tc := range []struct {
		name        string
		synchronous bool
		accept      bool
	}{
		{"asynchronous, default options", false, false},
		{"asynchronous, the risk accepted", false, true},
		{"synchronous", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t)
			if tc.synchronous {
				p.primary.Synchronous(t, true)
			}
			admin := p.url(t)
			if _, _, err := pgstore.Migrate(context.Background(), &pgstore.Options{URL: admin}); err != nil {
				t.Fatal(err)
			}
			// The application runs under a role with rights on the tables
			// alone, as docs/stores.md grants them.
			appURL := p.as(t, pgtest.Role(t, p.primary.URL(), appGrants...))
			p.caughtUp(t)
			dest := &destination{effects: map[string][]int{}}
			dest.phase.Store(1)
			opts := pgstore.Options{AcceptAsyncStandbys: tc.accept}
			replicas := []*appReplica{openAppReplica(t, appURL, dest, opts), openAppReplica(t, appURL, dest, opts), openAppReplica(t, appURL, dest, opts)}

			// Phase 1: 12 callers, every action called once; a while in,
			// the standby stops receiving, and a while later the primary dies.
			var actions []*failoverAction
			for id := range 400 {
				for _, tool := range []string{"charge", "book", "invoice"} {
					actions = append(actions, &failoverAction{tool: tool, id: id, dest: dest})
				}
			}
			work := make(chan *failoverAction)
			var wg sync.WaitGroup
			var called atomic.Int64
			for c := range 12 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for a := range work {
						a.call(replicas[c%len(replicas)], 3*time.Second)
						called.Add(1)
					}
				}()
			}
			// Once the standby stops receiving, a synchronous primary's
			// commits wait: a caller each is enough to be in flight.
			extra := 300
			if tc.synchronous {
				extra = 12
			}
			var issued []*failoverAction
			paused := 0
			for _, a := range actions {
				if paused == 0 && called.Load() >= 150 {
					p.primary.PauseSender(t)
					paused = len(issued)
				}
				if paused > 0 && len(issued) >= paused+extra {
					break
				}
				work <- a
				issued = append(issued, a)
			}
			p.failOver(t)
			close(work)
			wg.Wait()
			dest.phase.Store(2)

			// Phase 2: every action called again until it answers other
			// than store_unavailable or in_progress (a claim in flight at
			// the crash keeps its lease until it lapses).
			replicas[2].store.Close()
			replicas[2] = openAppReplica(t, appURL, dest, opts)
			deadline := time.Now().Add(30 * time.Second)
			for i, a := range issued {
				afterFailover(t, deadline, fmt.Sprintf("%s %d", a.tool, a.id), func() envelope.Envelope { return a.call(replicas[i%len(replicas)], 3*time.Second) })
			}

			// What a user checks: one effect at most, and envelopes that
			// never lie.
			counts := map[string]int{}
			for _, a := range issued {
				effects := dest.of(a.ref)
				if len(effects) > 1 {
					t.Errorf("%s %d (%s): %d effects, in phases %v", a.tool, a.id, a.ref, len(effects), effects)
				}
				for i, env := range a.envs {
					if lie := lies(env, dest.doneBefore(a.ref, a.ends[i])); lie != "" {
						t.Errorf("%s %d, call %d: %s; effects in phases %v; envelope %s", a.tool, a.id, i+1, lie, effects, env)
					}
				}
				first, last := a.envs[0], a.envs[len(a.envs)-1]
				switch {
				case a.tool != "invoice" && !tc.synchronous && !tc.accept && first.Status != envelope.DefiniteFailure:
					t.Errorf("%s %d: %s before the failover; want it refused, the primary streaming asynchronously", a.tool, a.id, first)
				case last.Status == envelope.UnknownOutcome && strings.Contains(last.Note, "failed over"):
					counts[a.tool+" lost"]++
				}
				counts[a.tool+" "+string(last.Status)]++
			}
			t.Logf("%d actions called, then again after the failover: %v", len(issued), counts)
			if tc.accept && counts["charge lost"] == 0 {
				t.Errorf("no at-most-once action's record was lost: the test did not reach what it tests")
			}
		})
	}
}

// lies returns what env claims that the destination does not bear out
// ("" if nothing), done being whether the action had been done when env
// was answered. A call that never reached the action's record
// (store_unavailable, cancelled) says only that it did nothing itself.
func lies(env envelope.Envelope, done bool) string {
	switch {
	case env.Status == envelope.Success && !done:
		return "success, and nothing was done"
	case env.Status == envelope.DefiniteFailure && done && env.Error.Code != envelope.CodeKeyReused &&
		env.Error.Code != envelope.CodeStoreUnavailable && env.Error.Code != envelope.CodeCancelled:
		return "definite_failure, and the action was done"
	}
	return ""
}

// appGrants are an application role's rights, as docs/stores.md lists them.
var appGrants = []string{
	"GRANT USAGE ON SCHEMA retrysafe TO {role}",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON retrysafe.records TO {role}",
	"GRANT SELECT ON retrysafe.migrations TO {role}",
	"GRANT USAGE ON SEQUENCE retrysafe.tokens TO {role}",
}

// A session whose synchronous_commit is off acknowledges a commit before
// its WAL is flushed, and a crash loses it. pgstore's writes commit as
// synchronous_commit = on whatever the session's setting: every claim an
// at-most-once tool acted on is still there after the server is killed
// and restarted, and a retry does not act again.
func TestClaimsSurviveACrashUnderSynchronousCommitOff(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	srv := pgtest.StartServer(t)
	srv.Exec(t, "ALTER ROLE retrysafe SET synchronous_commit = off", "ALTER SYSTEM SET wal_writer_delay = '10s'", "SELECT pg_reload_conf()")
	if _, _, err := pgstore.Migrate(context.Background(), &pgstore.Options{URL: srv.URL()}); err != nil {
		t.Fatal(err)
	}
	dest := &destination{effects: map[string][]int{}}
	dest.phase.Store(1)
	app := openAppReplica(t, srv.URL(), dest, pgstore.Options{})
	var session string
	if err := app.store.Pool().QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&session); err != nil || session != "off" {
		t.Fatalf("the session's synchronous_commit is %q (%v); the test needs it off", session, err)
	}
	var (
		mu      sync.Mutex
		actions []*failoverAction
		wg      sync.WaitGroup
		stop    atomic.Bool
	)
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				a := &failoverAction{tool: "charge", id: c*100000 + i}
				a.call(app, 3*time.Second)
				mu.Lock()
				actions = append(actions, a)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	srv.Kill(t)
	stop.Store(true)
	wg.Wait()
	srv.Start()
	dest.phase.Store(2)
	after := openAppReplica(t, srv.URL(), dest, pgstore.Options{})
	acted := 0
	for _, a := range actions {
		if len(dest.of(a.ref)) == 0 {
			continue
		}
		acted++
		if _, err := after.store.Get(context.Background(), a.ref); err != nil {
			t.Errorf("%s: the tool acted on its claim, and after the crash the store has no record of it: %v", a.ref, err)
		}
		env := a.call(after, 3*time.Second)
		if effects := dest.of(a.ref); len(effects) != 1 || env.Status == envelope.Success && !env.Replayed {
			t.Errorf("%s: effects in phases %v after a retry that answered %s", a.ref, effects, env)
		}
	}
	t.Logf("%d actions called, %d acted on before the crash", len(actions), acted)
	if acted == 0 {
		t.Fatal("no action was acted on: the test did not reach what it tests")
	}
}

// PostgreSQL keeps a commit whose wait for its synchronous standby was
// cancelled, and reports success with a warning. A claim whose wait is
// cancelled so (pg_cancel_backend here; a client that sends cancel
// requests does the same) is not durable where a failover can go: an
// at-most-once tool does not act on it, and the call says nothing was
// done. A keyed tool goes on: its destination dedupes.
func TestACancelledSynchronousWaitDoesNotLetAToolAct(t *testing.T) {
	p := newPair(t)
	p.primary.Synchronous(t, true)
	dest := &destination{effects: map[string][]int{}}
	dest.phase.Store(1)
	if _, _, err := pgstore.Migrate(context.Background(), &pgstore.Options{URL: p.primary.URL()}); err != nil {
		t.Fatal(err)
	}
	app := openAppReplica(t, p.primary.URL(), dest, pgstore.Options{})
	for _, tc := range []struct {
		tool string
		acts bool
	}{{"charge", false}, {"invoice", true}} {
		t.Run(tc.tool, func(t *testing.T) {
			resume := p.primary.PauseSender(t)
			a := &failoverAction{tool: tc.tool, id: 1}
			done := make(chan envelope.Envelope)
			go func() { done <- a.call(app, 30*time.Second) }()
			// Cancel the claim's wait for the standby once it waits.
			admin, err := pgx.Connect(context.Background(), p.primary.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close(context.Background())
			deadline := time.Now().Add(10 * time.Second)
			for {
				var cancelled bool
				err := admin.QueryRow(context.Background(),
					"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE 'INSERT%' LIMIT 1").Scan(&cancelled)
				if err == nil && cancelled {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no claim waited for the standby: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			// The claim is given back, and that write waits for the standby
			// too: let it catch up.
			time.Sleep(100 * time.Millisecond)
			resume()
			env := <-done
			effects := dest.of(a.ref)
			switch {
			case tc.acts && (env.Status != envelope.Success || len(effects) != 1):
				t.Errorf("a keyed tool after a cancelled wait: %d effects, envelope %s; want it done once", len(effects), env)
			case !tc.acts && (env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeStoreUnavailable || len(effects) != 0):
				t.Errorf("an at-most-once tool after a cancelled wait: %d effects, envelope %s; want store_unavailable and nothing done", len(effects), env)
			}
			if !tc.acts {
				// Nothing ran: the same action goes on when asked again.
				env := a.call(app, 10*time.Second)
				if env.Status != envelope.Success || len(dest.of(a.ref)) != 1 {
					t.Errorf("asked again: %d effects, envelope %s; want it done once", len(dest.of(a.ref)), env)
				}
			}
		})
	}
}

// Behind a pooler in transaction mode, where nothing set on a session
// survives its transaction and each transaction may go to another server
// connection, the checks hold: they are in the claim's own statement. An
// at-most-once claim is refused while the primary streams asynchronously;
// after a failover, with the pooler repointed at the promoted standby,
// tokens jump past the old primary's and a reconcilable claim of a key
// the failover lost is decided as lost.
func TestTheFailoverChecksHoldBehindAPoolerInTransactionMode(t *testing.T) {
	p := newPair(t)
	bouncer := pgtest.StartBouncer(t, p.primary)
	ctx := context.Background()
	if _, _, err := pgstore.Migrate(ctx, &pgstore.Options{URL: p.primary.URL()}); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.Open(ctx, &pgstore.Options{URL: bouncer.URL(), NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	p.caughtUp(t)
	if _, err := store.Claim(ctx, claimReq("pay/amo", time.Now(), true)); !errors.Is(err, storekit.ErrNotDurable) {
		t.Fatalf("an at-most-once claim through the pooler, the primary streaming asynchronously: %v; want ErrNotDurable", err)
	}
	var highest uint64
	for i := range 20 {
		res, err := store.Claim(ctx, claimReq(fmt.Sprintf("pay/before-%d", i), time.Now(), false))
		if err != nil {
			t.Fatal(err)
		}
		highest = max(highest, res.Record.Token)
	}
	p.caughtUp(t)
	p.primary.PauseSender(t)
	for i := range 100 {
		res, err := store.Claim(ctx, claimReq(fmt.Sprintf("pay/lost-%d", i), time.Now(), false))
		if err != nil {
			t.Fatal(err)
		}
		highest = max(highest, res.Record.Token)
	}
	p.failOver(t)
	bouncer.Retarget(p.standby)
	var tok uint64
	for attempt := 0; ; attempt++ {
		res, err := store.Claim(ctx, claimReq("pay/after", time.Now(), false))
		if err == nil {
			tok = res.Record.Token
			break
		}
		if attempt > 200 {
			t.Fatalf("no claim through the repointed pooler: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if tok <= highest {
		t.Errorf("token %d through the pooler on the new timeline; the old one handed out up to %d", tok, highest)
	}
	req := claimReq("pay/lost-3", time.Now(), true)
	req.TakeOver = true
	res, err := store.Claim(ctx, req)
	if err != nil || !res.Lost || !res.TookOver {
		t.Errorf("a reconcilable claim of a key the failover lost, through the pooler: %+v, %v; want it taken over as lost", res, err)
	}
}

// A claim acts only where it is durable where a failover can go, however
// its commit's wait for the synchronous standby ends. Here the primary
// waits for its standby (synchronous_standby_names = '*'), and the
// standby falls behind (its WAL sender paused): an at-most-once claim's
// commit waits. The operator, seeing every write hang, does what
// PostgreSQL's documentation suggests and turns synchronous replication
// off (synchronous_standby_names emptied, reload): PostgreSQL releases the
// waiting commit with no warning at all, acknowledged on the primary
// alone, while the standby it streams to asynchronously has not got it —
// the very setup in which pgstore refuses such claims. The tool acts on
// it. The primary then dies and the standby is promoted: the claim is
// gone, and the action, asked again, must not run a second time
// (unknown_outcome, or a replay, but one effect).
func TestAToolActsOnlyOnAClaimDurableWhereAFailoverCanGo(t *testing.T) {
	p := newPair(t)
	p.primary.Synchronous(t, true)
	if _, _, err := pgstore.Migrate(context.Background(), &pgstore.Options{URL: p.url(t)}); err != nil {
		t.Fatal(err)
	}
	p.caughtUp(t)
	dest := &destination{effects: map[string][]int{}}
	dest.phase.Store(1)
	app := openAppReplica(t, p.url(t), dest, pgstore.Options{})

	p.primary.PauseSender(t)
	a := &failoverAction{tool: "charge", id: 1, dest: dest}
	done := make(chan envelope.Envelope, 1)
	go func() { done <- a.call(app, 30*time.Second) }()
	admin, err := pgx.Connect(context.Background(), p.primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := admin.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE 'INSERT%'").Scan(&n)
		if err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no claim waited for the standby: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	admin.Close(context.Background())
	// The operator turns synchronous replication off: the waiting commit
	// is released, with no warning.
	p.primary.Synchronous(t, false)
	var first envelope.Envelope
	select {
	case first = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not answer")
	}
	t.Logf("before the failover: %s; effects %v", first, dest.of(a.ref))

	p.failOver(t)
	dest.phase.Store(2)
	last := afterFailover(t, time.Now().Add(30*time.Second), "the charge", func() envelope.Envelope { return a.call(app, 3*time.Second) })
	effects := dest.of(a.ref)
	if len(effects) > 1 {
		t.Errorf("%d effects, in phases %v: the tool acted on a claim the failover lost, and acted again; before the failover %s, after %s",
			len(effects), effects, first, last)
	}
	for i, env := range a.envs {
		if lie := lies(env, dest.doneBefore(a.ref, a.ends[i])); lie != "" {
			t.Errorf("call %d: %s; envelope %s", i+1, lie, env)
		}
	}
}

// The unknown fence (I9) holds across a failover to a synchronous
// standby: while an action of a tool in a conversation has an unknown
// outcome, a reworded resend does not run — on the promoted standby too.
// A keyed tool sends an invoice whose reply is lost: unknown_outcome. The
// model rewords it and calls again: held back, earlier_action_unknown.
// The primary dies and the standby is promoted; the model calls the
// reworded invoice again: still held back, one invoice.
//
// (On an asynchronous standby a keyed tool's claims go on, since its
// destination dedupes each key; but the unknown record that fences a
// reworded copy, which has another key, may be among the writes the
// failover loses. docs/stores.md says so, and doctor says it of keyed
// tools on such a setup.)
func TestTheUnknownFenceHoldsAcrossASynchronousFailover(t *testing.T) {
	p := newPair(t)
	p.primary.Synchronous(t, true)
	if _, _, err := pgstore.Migrate(context.Background(), &pgstore.Options{URL: p.url(t)}); err != nil {
		t.Fatal(err)
	}
	p.caughtUp(t)
	store, err := pgstore.Open(context.Background(), &pgstore.Options{URL: p.url(t), NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	type invoice struct {
		To     string `json:"to"`
		Amount int    `json:"amount"`
		Note   string `json:"note,omitempty"`
	}
	var (
		mu   sync.Mutex
		sent []string // the destination's invoices, by reference (it dedupes one)
		lose atomic.Bool
	)
	send := func(ctx context.Context, in invoice) (string, error) {
		ref := agenttool.RequestRef(ctx)
		mu.Lock()
		if !slices.Contains(sent, ref) {
			sent = append(sent, ref)
		}
		mu.Unlock()
		if lose.Load() {
			return "", errors.New("read tcp 127.0.0.1:443: connection reset by peer") // sent, the reply lost
		}
		return ref, nil
	}
	tool, err := agenttool.New("invoice", "Send an invoice.", send, agenttool.Options{Store: store, Class: agenttool.Keyed,
		Lease: 2 * time.Second, WaitTimeout: 50 * time.Millisecond, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(input string) envelope.Envelope {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return tool.Invoke(agenttool.WithScope(ctx, "tenant-1", "conversation-1"), input)
	}
	const (
		first    = `{"to":"ana@example.com","amount":120}`
		reworded = `{"to":"ana@example.com","amount":120,"note":"resent"}`
	)

	lose.Store(true)
	if env := call(first); env.Status != envelope.UnknownOutcome {
		t.Fatalf("the invoice whose reply was lost: %s; want unknown_outcome", env)
	}
	lose.Store(false)
	held := call(reworded)
	if held.Status != envelope.UnknownOutcome || held.Error == nil || held.Error.Code != envelope.CodeEarlierUnknown {
		t.Fatalf("the reworded invoice before the failover: %s; want it held back, earlier_action_unknown", held)
	}

	p.failOver(t)
	after := afterFailover(t, time.Now().Add(30*time.Second), "the reworded invoice", func() envelope.Envelope { return call(reworded) })
	mu.Lock()
	defer mu.Unlock()
	if len(sent) > 1 {
		t.Errorf("%d invoices sent for one action reworded after unknown_outcome: the reworded one ran on the promoted standby; it answered %s", len(sent), after)
	}
	if after.Error == nil || after.Error.Code != envelope.CodeEarlierUnknown {
		t.Errorf("the reworded invoice after the failover: %s; want it held back, earlier_action_unknown", after)
	}
}

// With AcceptAsyncStandbys, for FailoverWindow after a failover an
// at-most-once action whose latest claim the failover may have lost
// answers unknown_outcome, saying the store failed over, until a person
// settles it. The claim lost here is not a new key's but an approved
// retry's: the action's first attempt was unknown, and an operator found
// it not applied (ResolveNotApplied) — that much reached the standby. The
// next call runs the approved attempt (the effect) and records success on
// the primary alone, the standby having stopped receiving; the primary
// dies and the standby is promoted. On it the record is still "unknown,
// approved for one more attempt", as if that attempt had never run: the
// action, asked again within the window, must not run again.
func TestAnApprovedRetryLostInAFailoverDoesNotRunAgain(t *testing.T) {
	p := newPair(t)
	if _, _, err := pgstore.Migrate(context.Background(), &pgstore.Options{URL: p.url(t)}); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.Open(context.Background(), &pgstore.Options{URL: p.url(t), NoMigrate: true, AcceptAsyncStandbys: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var (
		effects atomic.Int32
		lose    atomic.Bool
	)
	charge := func(ctx context.Context, in chargeInput) (string, error) {
		if lose.Load() {
			return "", errors.New("read tcp 127.0.0.1:443: connection reset by peer") // the request never arrived, as the operator finds
		}
		effects.Add(1)
		return agenttool.RequestRef(ctx), nil
	}
	tool, err := agenttool.New("charge", "Charge a card.", charge, agenttool.Options{Store: store, Class: agenttool.AtMostOnce,
		Lease: 2 * time.Second, WaitTimeout: 50 * time.Millisecond, Retry: agenttool.RetryPolicy{MaxAttempts: 1},
		ClockSkew: -1}) // one process, one clock: a person may settle the lost call at once
	if err != nil {
		t.Fatal(err)
	}
	call := func() envelope.Envelope {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return tool.Invoke(agenttool.WithScope(ctx, "tenant-1", "conversation-1"), `{"id":1}`)
	}
	lose.Store(true)
	first := call()
	if first.Status != envelope.UnknownOutcome {
		t.Fatalf("the first attempt: %s; want unknown_outcome", first)
	}
	lose.Store(false)
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := op.Show(context.Background(), first.RequestRef)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.ResolveNotApplied(context.Background(), first.RequestRef, rec.Attempts, "ops", "the processor has no such charge"); err != nil {
		t.Fatal(err)
	}
	p.caughtUp(t)
	p.primary.PauseSender(t)
	if env := call(); env.Status != envelope.Success || effects.Load() != 1 {
		t.Fatalf("the approved retry: %s, %d effects; want success, once", env, effects.Load())
	}

	p.failOver(t)
	after := afterFailover(t, time.Now().Add(30*time.Second), "the charge", func() envelope.Envelope { return call() })
	if n := effects.Load(); n != 1 {
		t.Errorf("%d charges: the approved retry the failover lost ran again on the promoted standby, within the failover window; it answered %s", n, after)
	}
}

// afterFailover calls until the answer is other than store_unavailable or
// in_progress — a claim in flight at the crash keeps its lease until it
// lapses, and the pool reconnects — by deadline, and returns it.
func afterFailover(t *testing.T, deadline time.Time, what string, call func() envelope.Envelope) envelope.Envelope {
	t.Helper()
	for {
		env := call()
		if env.Error == nil || (env.Error.Code != envelope.CodeStoreUnavailable && env.Error.Code != envelope.CodeInProgress) {
			return env
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s after the failover: %s", what, env.Error.Code, env)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cancelSyncWaits cancels, until stop is called, every backend of
// srv whose commit waits for a synchronous standby (pg_cancel_backend, as
// TestACancelledSynchronousWaitDoesNotLetAToolAct does): PostgreSQL keeps
// each such commit and warns. With synchronous_standby_names = '*' and no
// standby, every commit waits until it is cancelled so.
func cancelSyncWaits(t *testing.T, srv *pgtest.Server) (stop func()) {
	t.Helper()
	admin, err := pgx.Connect(context.Background(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			admin.Exec(context.Background(), "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		admin.Close(context.Background())
	}
}

// A lone Unkeyed claim whose caller's deadline passes while its commit
// waits for the synchronous standby, on a pool whose connections send a
// cancel request when a context ends (ConfigurePool names such a client):
// the cancel ends the wait, PostgreSQL keeps the commit and warns, and the
// durability check after the commit, run on the ended context, fails too.
// The claim committed and is not known to be durable: it is given back
// and refused with ErrNotDurable, and the same action asked again is
// claimed. (Before, the check's failure was taken for the write's: the
// claim stayed pending under its owner, and the action was held back by
// its own record until the lease lapsed, then unknown, though the tool
// never ran.)
func TestALoneClaimWhoseCancelledWaitEndsItsCheckIsGivenBack(t *testing.T) {
	srv := pgtest.StartServer(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 20 * time.Second}
	}
	pgstore.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := pgstore.Open(ctx, &pgstore.Options{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A first claim records the timeline, before commits wait.
	if _, err := s.Claim(ctx, claimReq("pay/warm", time.Now(), true)); err != nil {
		t.Fatal(err)
	}
	srv.Synchronous(t, true)
	synced := true
	defer func() {
		if synced {
			srv.Synchronous(t, false)
		}
	}()

	req := claimReq("pay/lone", time.Now(), true)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = s.Claim(cctx, req)
	cancel()
	srv.Synchronous(t, false) // release whatever still waits
	synced = false
	rec, gerr := s.Get(ctx, req.Key)
	t.Logf("claim: %v; record afterwards: %+v, %v", err, rec, gerr)
	if err == nil {
		t.Skip("the claim was answered claimed: the cancel did not reach the commit's wait")
	}
	if !errors.Is(err, storekit.ErrNotDurable) {
		t.Errorf("a lone Unkeyed claim whose commit's wait was cancelled and whose check then failed: %v; want ErrNotDurable (given back)", err)
	}
	if gerr == nil && rec.State == storekit.Pending && rec.Owner == req.Owner {
		t.Errorf("the claim was refused, yet its record stays pending under its owner (token %d, lease to %v): "+
			"not given back, the action is held back by its own record until the lease lapses, then unknown", rec.Token, rec.LeaseExpiry)
	}
	// Asked again, the same action (a retry well within the lease).
	again, aerr := s.Claim(ctx, claimReq(req.Key, time.Now(), true))
	if aerr != nil || !again.Claimed {
		t.Errorf("the same action asked again after a refusal that said the tool did not act: %+v, %v; want claimed", again, aerr)
	}
}

// A reconcilable tool's earlier attempt ended unknown: its record fences
// the scope and makes the next claim ask the destination first. The next
// claim takes the record over (claimLocked), and its commit's wait for the
// synchronous standby is cancelled: it is given back, and the store holds
// again the record it took over, unknown, under its token — not no
// record, which a claim asked again would take for a new action and run
// without asking the destination whether the earlier attempt was applied
// (a second effect if it was), the unknown fence (I9) lifted meanwhile.
func TestATakeoverGivenBackLeavesTheUnknownRecordAsItWas(t *testing.T) {
	srv := pgtest.StartServer(t)
	ctx := context.Background()
	s, err := pgstore.Open(ctx, &pgstore.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	first := claimReq("pay/unknown", now, true)
	first.TakeOver = true
	res, err := s.Claim(ctx, first)
	if err != nil || !res.Claimed {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: first.Key, Token: res.Record.Token, State: storekit.Unknown, Attempts: 1,
		Now: now, TTL: time.Hour, HeldUntil: now}); err != nil {
		t.Fatal(err)
	}

	srv.Synchronous(t, true)
	stop := cancelSyncWaits(t, srv)
	take := claimReq(first.Key, time.Now(), true)
	take.Owner = "o-second"
	take.TakeOver = true
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	got, err := s.Claim(cctx, take)
	cancel()
	stop()
	srv.Synchronous(t, false)
	t.Logf("takeover under a cancelled synchronous wait: %+v, %v", got, err)
	if err == nil {
		t.Skip("the takeover was granted: no warning reached it")
	}
	if !errors.Is(err, storekit.ErrNotDurable) {
		t.Fatalf("takeover: %v; want ErrNotDurable", err)
	}
	rec, err := s.Get(ctx, first.Key)
	if err != nil {
		t.Errorf("after the takeover was given back the record of the earlier attempt, whose outcome is unknown, is gone: %v; "+
			"want it unknown still (or pending under the lapsing lease)", err)
	} else if rec.State != storekit.Unknown || rec.Token != res.Record.Token || rec.Owner != "" {
		t.Errorf("after the takeover was given back: %+v; want the unknown record as it was, token %d", rec, res.Record.Token)
	}
	third := claimReq(first.Key, time.Now(), true)
	third.Owner = "o-third"
	third.TakeOver = true
	again, err := s.Claim(ctx, third)
	if err != nil || !again.Claimed || !again.TookOver {
		t.Errorf("the action asked again: %+v, %v; want it taken over, the destination asked first "+
			"whether the earlier attempt, of unknown outcome, was applied", again, err)
	}
}

// replaceScope is the fence scope (the session's) of the give-back tests' claims.
var replaceScope = storekit.Digest{2}

// fencedReq is an Unkeyed claim of tool pay in the session's slot.
func fencedReq(key, owner string) storekit.ClaimRequest {
	r := claimReq(key, time.Now(), true)
	r.Owner, r.FenceScope, r.KeyTTL = owner, replaceScope, time.Hour
	return r
}

// replacementOf is what the engine's c.replacing hands a claim that goes
// on in place of key, unknown and approved after attempts attempts.
func replacementOf(key string, attempts int) *storekit.Replacement {
	return &storekit.Replacement{Key: key, Attempts: attempts, Outcome: []byte(`{"status":"definite_failure"}`), TTL: time.Hour}
}

// chainFrom follows Record.ReplacedBy from key as agenttool's inPlaceOf
// does, and reports the keys met and whether the walk came back to a key
// it had met (a cycle: inPlaceOf walks it maxChain times and fails).
func chainFrom(t *testing.T, s *pgstore.Store, key string) (keys []string, cycle bool) {
	t.Helper()
	seen := map[string]bool{}
	for range 16 {
		rec, err := s.Get(context.Background(), key)
		if errors.Is(err, storekit.ErrNotFound) {
			return append(keys, key+"(none)"), false
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		if seen[key] {
			return keys, true
		}
		seen[key] = true
		if rec.State != storekit.Failed || rec.ReplacedBy == "" {
			return keys, false
		}
		key = rec.ReplacedBy
	}
	return keys, true
}

// underCancelledWaits runs claim while every commit's wait for the
// synchronous standby is cancelled (PostgreSQL keeps the commit and warns).
func underCancelledWaits(t *testing.T, srv *pgtest.Server, claim func(ctx context.Context) (storekit.ClaimResult, error)) (storekit.ClaimResult, error) {
	t.Helper()
	srv.Synchronous(t, true)
	stop := cancelSyncWaits(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	res, err := claim(ctx)
	cancel()
	stop()
	srv.Synchronous(t, false)
	return res, err
}

// A replaced action asked for again goes on in place of its replacement
// (storekit.DecideClaim: a failed record replaced by C, claimed with
// req.Replace naming C, which is unknown and approved for a retry). That
// claim writes two records: its own (B: from failed, replaced by C, to
// pending, replacing C) and C's (from unknown, approved, to failed,
// replaced by B). Its commit's wait for the synchronous standby is
// cancelled: the give-back puts both back as the claim found them. Put
// back alone, B would be failed, replaced by C, and C failed, replaced by
// B: a loop the engine walks 1024 times before it answers
// store_unavailable to every later call of either action, until the
// records expire, though neither ever ran.
func TestAReplacedActionGivenBackInItsReplacementsPlaceLeavesBothAsTheyWere(t *testing.T) {
	srv := pgtest.StartServer(t)
	s, err := pgstore.Open(context.Background(), &pgstore.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// B ran, its outcome unknown and found not applied; the model reworded
	// it, and C went on in its place, unknown and found not applied too.
	beforeB, beforeC := replacedPair(t, s, "pay")
	if keys, cycle := chainFrom(t, s, beforeB.Key); cycle {
		t.Fatalf("a cycle before the give-back: %v", keys)
	}
	// The model asks for B again, word for word: the engine finds B
	// replaced by C, which is free (approved), and claims B in C's place.
	again := fencedReq(beforeB.Key, "o-b2")
	again.Replace = replacementOf(beforeC.Key, 1)
	got, err := underCancelledWaits(t, srv, func(ctx context.Context) (storekit.ClaimResult, error) { return s.Claim(ctx, again) })
	t.Logf("B in C's place under a cancelled synchronous wait: %+v, %v", got, err)
	if err == nil {
		t.Skip("the claim was granted: no warning reached it")
	}
	if !errors.Is(err, storekit.ErrNotDurable) {
		t.Fatalf("claim: %v; want ErrNotDurable", err)
	}
	asFound(t, s, "the give-back", beforeB, beforeC)
	if keys, cycle := chainFrom(t, s, beforeB.Key); cycle {
		t.Errorf("after the give-back the records replace one another in a loop %v: every later call of either "+
			"walks it 1024 times and answers store_unavailable until the records expire; neither action ever ran", keys)
	}
}

// The same through the engine, as a user meets it: an at-most-once tool
// "charge" in one conversation (the default fence, by session). Charge 1
// ends unknown and a person finds it not applied; the model rewords it as
// charge 2, which goes on in its place, ends unknown too, and is found
// not applied. The model asks for charge 1 again while the primary's
// commits warn that their wait for the synchronous standby was cancelled:
// store_unavailable, nothing charged. With the store healthy again, the
// model asks for charge 1, and for charge 2: neither answers
// store_unavailable, and at most one charge is made.
func TestAReplacedActionGivenBackInItsReplacementsPlaceCanStillBeDone(t *testing.T) {
	ctx := context.Background()
	r, one, two := replacedCharges(t)
	// Charge 1 asked for again while every commit's wait is cancelled.
	r.srv.Synchronous(t, true)
	stop := cancelSyncWaits(t, r.srv)
	refused := r.call(ctx, 1)
	stop()
	r.srv.Synchronous(t, false)
	t.Logf("charge 1 asked again under a cancelled synchronous wait: %s", refused)
	if refused.Status == envelope.Success {
		t.Skip("the claim was granted: no warning reached it")
	}
	if n1 := r.charged(); refused.Status != envelope.DefiniteFailure || refused.Error == nil || refused.Error.Code != envelope.CodeStoreUnavailable || n1 != 0 {
		t.Fatalf("charge 1 under a cancelled wait: %s, %d charges; want store_unavailable, none", refused, n1)
	}
	r.log(ctx, one, two)
	// The store is healthy again: the model asks for charge 1, then 2.
	for _, id := range []int{1, 2} {
		env := r.call(ctx, id)
		t.Logf("charge %d asked again: %s", id, env)
		if env.Status == envelope.DefiniteFailure && env.Error != nil && env.Error.Code == envelope.CodeStoreUnavailable {
			t.Errorf("charge %d, asked again with the store healthy, answers store_unavailable (%s): the records of charges 1 and 2 "+
				"replace one another in a cycle the give-back left; neither charge was ever made, and every call answers so until they expire",
				id, env.Error.Message)
		}
	}
	if n := r.charged(); n > 1 {
		t.Errorf("%d charges made; want at most one (charge 2 is charge 1 reworded)", n)
	}
}

// An approved retry (an unknown record resolved not applied) whose claim
// is given back keeps its approval: the record is unknown, approved, its
// attempts and token as they were, and the retry asked again is granted
// as the approved one (not a fresh action, not unknown awaiting a person
// again).
func TestAnApprovedRetryGivenBackKeepsItsApproval(t *testing.T) {
	srv := pgtest.StartServer(t)
	ctx := context.Background()
	s, err := pgstore.Open(ctx, &pgstore.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := fencedReq("pay/approved", "o-1")
	res, err := s.Claim(ctx, first)
	if err != nil || !res.Claimed {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: first.Key, Token: res.Record.Token, State: storekit.Unknown, Attempts: 1,
		RetryApproved: true, Now: time.Now(), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Get(ctx, first.Key)
	if err != nil {
		t.Fatal(err)
	}
	retry := fencedReq(first.Key, "o-2")
	got, err := underCancelledWaits(t, srv, func(ctx context.Context) (storekit.ClaimResult, error) { return s.Claim(ctx, retry) })
	if err == nil {
		t.Skip("the claim was granted: no warning reached it")
	}
	if !errors.Is(err, storekit.ErrNotDurable) {
		t.Fatalf("approved retry under a cancelled wait: %+v, %v; want ErrNotDurable", got, err)
	}
	after, err := s.Get(ctx, first.Key)
	if err != nil {
		t.Fatalf("the approved record is gone after the give-back: %v", err)
	}
	if after.State != storekit.Unknown || !after.RetryApproved || after.Attempts != before.Attempts || after.Token != before.Token || after.Owner != "" {
		t.Errorf("after the give-back: %+v; want as before: %+v", after, before)
	}
	again, err := s.Claim(ctx, fencedReq(first.Key, "o-3"))
	if err != nil || !again.Claimed || !again.Approved || again.Record.Attempts != 1 {
		t.Errorf("the approved retry asked again: %+v, %v; want it claimed on the approval, attempts 1", again, err)
	}
}

// replacedPair sets up, in store s, the state of
// TestAReplacedActionGivenBackInItsReplacementsPlaceLeavesBothAsTheyWere:
// B failed, replaced by C; C unknown, approved for one more attempt. It
// returns the records as they are.
func replacedPair(t *testing.T, s *pgstore.Store, prefix string) (b, c storekit.Record) {
	t.Helper()
	ctx := context.Background()
	rb, err := s.Claim(ctx, fencedReq(prefix+"/b", "o-b1"))
	if err != nil || !rb.Claimed {
		t.Fatalf("claim B: %+v, %v", rb, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: prefix + "/b", Token: rb.Record.Token, State: storekit.Unknown, Attempts: 1,
		RetryApproved: true, Now: time.Now(), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	cr := fencedReq(prefix+"/c", "o-c1")
	cr.Replace = replacementOf(prefix+"/b", 1)
	rc, err := s.Claim(ctx, cr)
	if err != nil || !rc.Claimed || rc.Record.Replaces != prefix+"/b" {
		t.Fatalf("claim C in B's place: %+v, %v", rc, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: cr.Key, Token: rc.Record.Token, State: storekit.Unknown, Attempts: 1,
		RetryApproved: true, Now: time.Now(), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	b, errB := s.Get(ctx, prefix+"/b")
	c, errC := s.Get(ctx, cr.Key)
	if errB != nil || errC != nil {
		t.Fatal(errB, errC)
	}
	return b, c
}

// interposition is what interpose saw.
type interposition struct {
	res            storekit.ClaimResult
	err            error
	giveBackWaited bool // another backend waited on the row lock the admin held
}

// interpose runs claim with srv's commits waiting for a standby that does
// not exist, and steps in between the claim's commit and its give-back:
// while the claim's commit waits (SyncRep), an admin transaction queues a
// FOR SHARE lock on the record of lockKey (the claim wrote it, so the lock
// waits for the commit); then every wait is cancelled (PostgreSQL keeps
// the commit and warns). The admin's lock is granted the moment the claim
// commits, before the claim's give-back runs; once another backend waits
// on that row (the give-back's restoreOther), or 3 s pass, act runs in
// the admin transaction, which then commits (or rolls back if act says
// so).
func interpose(t *testing.T, srv *pgtest.Server, lockKey string, claim func(ctx context.Context) (storekit.ClaimResult, error),
	act func(ctx context.Context, tx pgx.Tx) (commit bool)) interposition {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	mon, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close(ctx)
	if _, err := admin.Exec(ctx, "SET synchronous_commit = local"); err != nil {
		t.Fatal(err)
	}
	adminPID := admin.PgConn().PID()

	srv.Synchronous(t, true)
	synced := true
	defer func() {
		if synced {
			srv.Synchronous(t, false)
		}
	}()
	done := make(chan interposition, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		res, err := claim(cctx)
		done <- interposition{res: res, err: err}
	}()
	waitFor := func(what, q string, args ...any) bool {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			var n int
			if err := mon.QueryRow(ctx, q, args...).Scan(&n); err == nil && n > 0 {
				return true
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Logf("gave up waiting for %s", what)
		return false
	}
	if !waitFor("the claim's commit to wait for the standby",
		`SELECT count(*) FROM pg_stat_activity a WHERE a.wait_event = 'SyncRep'
			AND EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND l.relation = 'retrysafe.records'::regclass)`) {
		t.Fatal("no claim commit waited")
	}
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() {
		_, err := tx.Exec(ctx, `SELECT 1 FROM retrysafe.records WHERE key = $1 FOR SHARE`, lockKey)
		locked <- err
	}()
	waitFor("the admin's lock to queue", `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, adminPID)
	stop := cancelSyncWaits(t, srv)
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	var got interposition
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		mon.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid <> $1 AND wait_event_type = 'Lock'
			AND query ILIKE 'UPDATE%'`, adminPID).Scan(&n)
		if n > 0 {
			got.giveBackWaited = true
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if act(ctx, tx) {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		tx.Rollback(ctx)
	}
	r := <-done
	stop()
	srv.Synchronous(t, false)
	synced = false
	r.giveBackWaited = got.giveBackWaited
	return r
}

func sameRecord(now, was storekit.Record) bool {
	return now.State == was.State && now.Token == was.Token && now.Owner == was.Owner && now.Replaces == was.Replaces &&
		now.ReplacedBy == was.ReplacedBy && now.RetryApproved == was.RetryApproved && now.Attempts == was.Attempts
}

// giveBackWindow claims B again in C's place (replacedPair), on a store
// of a private server, while between runs in another transaction in the
// window between the claim's commit and its give-back (interpose), and
// returns the store, B and C as they were before, the claim, and what
// interpose saw; between is given the server's URL. It skips the test if
// no warning reached the claim, and fails it if the claim was not refused
// as not durable.
func giveBackWindow(t *testing.T, between func(ctx context.Context, tx pgx.Tx, url string) bool) (s *pgstore.Store, beforeB, beforeC storekit.Record, again storekit.ClaimRequest, got interposition) {
	t.Helper()
	srv := pgtest.StartServer(t)
	s, err := pgstore.Open(context.Background(), &pgstore.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	beforeB, beforeC = replacedPair(t, s, "pay")
	again = fencedReq(beforeB.Key, "o-b2")
	again.Replace = replacementOf(beforeC.Key, 1)
	got = interpose(t, srv, beforeC.Key, func(ctx context.Context) (storekit.ClaimResult, error) { return s.Claim(ctx, again) },
		func(ctx context.Context, tx pgx.Tx) bool { return between(ctx, tx, srv.URL()) })
	t.Logf("claim: %+v, %v; give-back waited on the lock: %v", got.res, got.err, got.giveBackWaited)
	if got.err == nil {
		t.Skip("the claim was granted: no warning reached it")
	}
	if !errors.Is(got.err, storekit.ErrNotDurable) {
		t.Fatalf("claim: %v; want ErrNotDurable", got.err)
	}
	return s, beforeB, beforeC, again, got
}

// asFound checks that each record in was is in s as it was.
func asFound(t *testing.T, s *pgstore.Store, after string, was ...storekit.Record) {
	t.Helper()
	for _, w := range was {
		now, err := s.Get(context.Background(), w.Key)
		if err != nil || !sameRecord(now, w) {
			t.Errorf("after %s, %s is %+v (%v); want it as found: %+v", after, w.Key, now, err, w)
		}
	}
}

// A row lock (FOR SHARE) taken on the replacement C by another
// transaction between the claim's commit and its give-back sets C's xmax
// only: the give-back waits for it, and then puts both records back as
// the claim found them (C's xmin is still the claim's).
func TestAGiveBackWaitsOutAnotherTransactionsRowLock(t *testing.T) {
	s, b, c, _, _ := giveBackWindow(t, func(context.Context, pgx.Tx, string) bool { time.Sleep(300 * time.Millisecond); return true })
	asFound(t, s, "a give-back that waited out a row lock", b, c)
}

// The same, but the other transaction updates C and rolls back: C's
// xmin is still the claim's, and the give-back goes through.
func TestAGiveBackPastAnotherTransactionsRolledBackUpdatePutsBothBack(t *testing.T) {
	s, b, c, _, _ := giveBackWindow(t, func(ctx context.Context, tx pgx.Tx, _ string) bool {
		if _, err := tx.Exec(ctx, `UPDATE retrysafe.records SET label = 'x' WHERE key = 'pay/c'`); err != nil {
			t.Error(err)
		}
		return false
	})
	asFound(t, s, "a give-back past a rolled-back update", b, c)
}

// Another transaction rewrites C (a no-op UPDATE: a new version,
// a new xmin) between the commit and the give-back: the give-back must
// put back nothing (all or nothing), leaving B pending under the claim's
// token, replacing C, and C closed as replaced by B — no cycle, nothing
// free to run, the unknown fence held by B's pending record.
func TestAGiveBackRefusedWhenAnOccupantChangedLeavesNoLoop(t *testing.T) {
	ctx := context.Background()
	s, beforeB, beforeC, again, _ := giveBackWindow(t, func(ctx context.Context, tx pgx.Tx, _ string) bool {
		if _, err := tx.Exec(ctx, `UPDATE retrysafe.records SET label = label WHERE key = 'pay/c'`); err != nil {
			t.Error(err)
		}
		return true
	})
	b, errB := s.Get(ctx, beforeB.Key)
	c, errC := s.Get(ctx, beforeC.Key)
	t.Logf("B: %+v (%v)\nC: %+v (%v)", b, errB, c, errC)
	restored := errB == nil && errC == nil && sameRecord(b, beforeB) && sameRecord(c, beforeC)
	untouched := errB == nil && errC == nil && b.State == storekit.Pending && b.Owner == again.Owner && b.Replaces == beforeC.Key &&
		c.State == storekit.Failed && c.ReplacedBy == beforeB.Key
	if !untouched && !restored {
		t.Errorf("a give-back that met a changed occupant left a mixed state: B %+v, C %+v", b, c)
	}
	if keys, cycle := chainFrom(t, s, beforeB.Key); cycle {
		t.Errorf("cycle after a refused give-back: %v", keys)
	}
	// Nothing is free to run meanwhile: a new write of the session is held
	// back.
	other, err := s.Claim(ctx, fencedReq("pay/new", "o-new"))
	if err != nil || other.Claimed {
		t.Errorf("a new write of the session after the refused give-back: %+v, %v; want held back", other, err)
	}
}

// A second replica claims a new write of the same session in the
// window between the claim's commit and its give-back: it is held back
// either way (by B pending, or by C unknown and approved, put back), and
// the give-back still puts both records back.
func TestASecondReplicasClaimInAGiveBacksWindowIsHeldBack(t *testing.T) {
	var wg sync.WaitGroup
	var other storekit.ClaimResult
	var otherErr error
	s, b, c, _, _ := giveBackWindow(t, func(ctx context.Context, tx pgx.Tx, url string) bool {
		s2, err := pgstore.Open(ctx, &pgstore.Options{URL: url})
		if err != nil {
			t.Error(err)
			return true
		}
		t.Cleanup(func() { s2.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			other, otherErr = s2.Claim(cctx, fencedReq("pay/l", "o-l"))
		}()
		time.Sleep(200 * time.Millisecond)
		return true
	})
	wg.Wait()
	t.Logf("the other replica's claim: %+v, %v", other, otherErr)
	if otherErr == nil && other.Claimed {
		t.Errorf("the second replica's write was granted while B's claim or C's approved retry held the slot: %+v", other)
	}
	asFound(t, s, "a give-back with a second replica's claim in its window", b, c)
}

// Through the engine: the give-back is refused (C rewritten in
// the window), and the engine's unclaim runs after: charge 1 comes back
// approved in charge 2's place. With the store healthy, asking for charge
// 1 and 2 makes at most one charge, and neither answers store_unavailable
// for good.
func TestARefusedGiveBackThroughTheEngineMakesAtMostOneCharge(t *testing.T) {
	ctx := context.Background()
	r, one, two := replacedCharges(t)
	var refused envelope.Envelope
	got := interpose(t, r.srv, two.RequestRef, func(ctx context.Context) (storekit.ClaimResult, error) {
		refused = r.call(ctx, 1)
		return storekit.ClaimResult{}, nil
	}, func(ctx context.Context, tx pgx.Tx) bool {
		if _, err := tx.Exec(ctx, `UPDATE retrysafe.records SET label = label WHERE key = $1`, two.RequestRef); err != nil {
			t.Error(err)
		}
		return true
	})
	t.Logf("charge 1 under a cancelled wait, C rewritten in the window: %s (give-back waited %v)", refused, got.giveBackWaited)
	r.log(ctx, one, two)
	if refused.Status == envelope.Success {
		t.Skip("granted: no warning reached it")
	}
	if n := r.charged(); n != 0 {
		t.Fatalf("a refused call charged: %d", n)
	}
	time.Sleep(2500 * time.Millisecond) // past the lease
	for _, id := range []int{1, 2, 1} {
		env := r.call(ctx, id)
		t.Logf("charge %d asked again: %s", id, env)
	}
	if n := r.charged(); n > 1 {
		t.Errorf("%d charges made; want at most one", n)
	}
}

// chargeRig is an at-most-once tool "charge" (a lease of 2 s) on a store
// of a private server, with its operator; each attempt's reply is lost
// before the charge is sent (unknown, nothing done) while lose is set.
type chargeRig struct {
	t     *testing.T
	srv   *pgtest.Server
	store *pgstore.Store
	tool  *agenttool.Tool
	op    *agenttool.Operator

	mu      sync.Mutex
	effects int
	lose    bool
}

// replacedCharges makes a chargeRig and, in one conversation, charge 1,
// which ends unknown and is found not applied, then charge 2, charge 1
// reworded, which goes on in its place, ends unknown and is found not
// applied too. Attempts then charge.
func replacedCharges(t *testing.T) (r *chargeRig, one, two envelope.Envelope) {
	t.Helper()
	ctx := context.Background()
	r = &chargeRig{t: t, srv: pgtest.StartServer(t), lose: true}
	var err error
	if r.store, err = pgstore.Open(ctx, &pgstore.Options{URL: r.srv.URL()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.store.Close() })
	charge := func(ctx context.Context, in chargeInput) (string, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.lose {
			return "", envelope.MarkUnknown(errors.New("the gateway timed out before it sent the charge"))
		}
		r.effects++
		return agenttool.RequestRef(ctx), nil
	}
	if r.tool, err = agenttool.New("charge", "Charge a card.", charge, agenttool.Options{Store: r.store, Class: agenttool.AtMostOnce,
		Lease: 2 * time.Second, WaitTimeout: 50 * time.Millisecond, Retry: agenttool.RetryPolicy{MaxAttempts: 1},
		AttemptTimeout: 200 * time.Millisecond, ClockSkew: -1}); err != nil {
		t.Fatal(err)
	}
	if r.op, err = agenttool.NewOperator(r.store, r.tool); err != nil {
		t.Fatal(err)
	}
	for i, env := range []*envelope.Envelope{&one, &two} {
		*env = r.call(ctx, i+1)
		if env.Status != envelope.UnknownOutcome {
			t.Fatalf("charge %d: %s; want unknown_outcome", i+1, env)
		}
		time.Sleep(300 * time.Millisecond) // past the attempt's flight
		if err := r.op.ResolveNotApplied(ctx, env.RequestRef, env.Attempts, "maria", "not in the ledger"); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	r.lose = false
	r.mu.Unlock()
	return r, one, two
}

// call asks for charge id in the conversation.
func (r *chargeRig) call(ctx context.Context, id int) envelope.Envelope {
	c, cancel := context.WithTimeout(agenttool.WithScope(ctx, "tenant-1", "conversation-1"), 30*time.Second)
	defer cancel()
	return r.tool.Invoke(c, fmt.Sprintf(`{"id":%d}`, id))
}

// charged is how many charges were made.
func (r *chargeRig) charged() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.effects
}

// log logs the records of the charges' envelopes.
func (r *chargeRig) log(ctx context.Context, envs ...envelope.Envelope) {
	for _, env := range envs {
		rec, err := r.store.Get(ctx, env.RequestRef)
		r.t.Logf("%s: state %v, approved %v, owner %q, replaced by %q, replaces %q (%v)", env.RequestRef, rec.State, rec.RetryApproved, rec.Owner, rec.ReplacedBy, rec.Replaces, err)
	}
}
