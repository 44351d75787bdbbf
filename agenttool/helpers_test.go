package agenttool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// emailInput is the input of the test send_email tool.
type emailInput struct {
	To      string `json:"to" desc:"recipient address"`
	Subject string `json:"subject"`
	Body    string `json:"body,omitempty"`
}

type sent struct {
	MessageID string `json:"message_id"`
}

// mailServer is a fake destination that records effects by request
// reference. Its behaviour per attempt is scripted.
type mailServer struct {
	mu      sync.Mutex
	effects []string // request refs of delivered messages, in order
	runs    atomic.Int64
	// script returns, for the n-th run (from 1), whether to deliver and the
	// error to return afterwards (or before, if deliver is false).
	script func(n int) (deliver bool, err error)
	// dedupe makes the server honour the request reference as an
	// idempotency key, as a keyed destination does.
	dedupe bool
	delay  time.Duration
}

func (m *mailServer) send(ctx context.Context, in emailInput) (sent, error) {
	n := int(m.runs.Add(1))
	ref := agenttool.RequestRef(ctx)
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	deliver, err := true, error(nil)
	if m.script != nil {
		deliver, err = m.script(n)
	}
	if deliver {
		m.mu.Lock()
		dup := false
		if m.dedupe {
			for _, e := range m.effects {
				dup = dup || e == ref
			}
		}
		if !dup {
			m.effects = append(m.effects, ref)
		}
		m.mu.Unlock()
	}
	if err != nil {
		return sent{}, err
	}
	return sent{MessageID: "<" + ref + "@mail.test>"}, nil
}

// sent counts the deliveries of the action of request reference ref.
func (m *mailServer) sent(ref string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.effects {
		if e == ref {
			n++
		}
	}
	return n
}

func (m *mailServer) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.effects)
}

var errLostReply = errors.New("read tcp 127.0.0.1:25: connection reset by peer")

// fastRetry keeps tests quick.
var fastRetry = agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond}

func newEmailTool(t testing.TB, m *mailServer, opts agenttool.Options) *agenttool.Tool {
	t.Helper()
	if opts.Retry == (agenttool.RetryPolicy{}) {
		opts.Retry = fastRetry
	}
	if opts.ClockSkew == 0 && opts.AttemptTimeout == 0 && opts.LateWindow == 0 {
		// One process, one clock: an attempt that ended cannot still
		// land, and a person may settle it at once (the in-flight rule's
		// own tests set a window).
		opts.ClockSkew = -1
	}
	if opts.Class == agenttool.Reconcilable && opts.Reconciler == nil {
		// These tests settle such tools' unknown outcomes themselves.
		opts.SettledByOperators = true
	}
	tool, err := agenttool.New("send_email", "Send an email.", m.send, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func scoped() context.Context {
	return agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")
}

// scopedTo is scoped's principal in another conversation.
func scopedTo(session string) context.Context {
	return agenttool.WithScope(context.Background(), "tenant-42/user-7", session)
}

const emailToAna = `{"to":"ana@example.com","subject":"Lunch","body":"See you at noon."}`

// storeKinds runs a test against each store.
func storeKinds(t *testing.T, fn func(t *testing.T, open func() agenttool.Store)) {
	t.Run("memstore", func(t *testing.T) {
		fn(t, func() agenttool.Store { return memstore.New() })
	})
	t.Run("boltstore", func(t *testing.T) {
		fn(t, func() agenttool.Store { return openBolt(t, filepath.Join(t.TempDir(), "keys.db")) })
	})
	t.Run("pgstore", func(t *testing.T) {
		fn(t, func() agenttool.Store { return pgtest.Open(t) })
	})
}

// fences runs a test under each fence that holds a scope: per session (the
// default) and per principal, in subtests named name and the fence.
func fences(t *testing.T, name string, fn func(t *testing.T, fence agenttool.FenceScope)) {
	for _, f := range []agenttool.FenceScope{agenttool.FenceSession, agenttool.FencePrincipal} {
		sub := "fence " + f.String()
		if name != "" {
			sub = name + "/" + sub
		}
		t.Run(sub, func(t *testing.T) { fn(t, f) })
	}
}

func openBolt(t testing.TB, path string) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustStatus(t *testing.T, env envelope.Envelope, want envelope.Status) {
	t.Helper()
	if env.Status != want {
		t.Fatalf("status = %s, want %s; envelope %s", env.Status, want, env)
	}
}

// faultyStore fails chosen operations, as a store that goes away would.
type faultyStore struct {
	agenttool.Store
	failClaim, failFinish, failRelease, failRenew, failList, failGet atomic.Bool
}

// down makes every read and write fail: the store cannot be reached.
func (f *faultyStore) down() {
	for _, b := range []*atomic.Bool{&f.failClaim, &f.failFinish, &f.failRelease, &f.failRenew, &f.failList, &f.failGet} {
		b.Store(true)
	}
}

func (f *faultyStore) Get(ctx context.Context, key string) (storekit.Record, error) {
	if f.failGet.Load() {
		return storekit.Record{}, errStoreDown
	}
	return f.Store.Get(ctx, key)
}

// die makes every write of a holder fail (recording an outcome, giving the
// key back, renewing a lease): the holder's process is as good as dead.
func (f *faultyStore) die() {
	f.failFinish.Store(true)
	f.failRelease.Store(true)
	f.failRenew.Store(true)
}

// heal makes every operation work again.
func (f *faultyStore) heal() {
	for _, b := range []*atomic.Bool{&f.failClaim, &f.failFinish, &f.failRelease, &f.failRenew, &f.failList, &f.failGet} {
		b.Store(false)
	}
}

func (f *faultyStore) ListUnknown(ctx context.Context, r storekit.ListRequest) ([]storekit.Record, error) {
	if f.failList.Load() {
		return nil, errStoreDown
	}
	return f.Store.ListUnknown(ctx, r)
}

func (f *faultyStore) Renew(ctx context.Context, r storekit.RenewRequest) error {
	if f.failRenew.Load() {
		return errStoreDown
	}
	return f.Store.Renew(ctx, r)
}

var errStoreDown = errors.New("connection to store refused")

func (f *faultyStore) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if f.failClaim.Load() {
		return storekit.ClaimResult{}, errStoreDown
	}
	return f.Store.Claim(ctx, r)
}

func (f *faultyStore) Finish(ctx context.Context, r storekit.FinishRequest) error {
	if f.failFinish.Load() {
		return errStoreDown
	}
	return f.Store.Finish(ctx, r)
}

func (f *faultyStore) Release(ctx context.Context, key string, token uint64) error {
	if f.failRelease.Load() {
		return errStoreDown
	}
	return f.Store.Release(ctx, key, token)
}

// clock is a manual clock for lease and expiry tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// firstLost: attempt 1 is not delivered and its reply is lost (unknown);
// every later attempt delivers.
func firstLost() *mailServer {
	return &mailServer{script: func(n int) (bool, error) {
		if n == 1 {
			return false, errLostReply
		}
		return true, nil
	}}
}

const lunchRephrased = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you?"}`

// gatedMail is a mail server whose n-th run (gateRun) waits on gate before
// it delivers, and signals started when it begins: a slow SMTP server.
// Run 1 is not delivered and its reply is lost (unknown); every other run
// delivers.
type gatedMail struct {
	*mailServer
	gateRun int
	gate    chan struct{}
	started chan struct{}
}

func newGatedMail(gateRun int) *gatedMail {
	g := &gatedMail{gateRun: gateRun, gate: make(chan struct{}), started: make(chan struct{})}
	g.mailServer = &mailServer{script: func(n int) (bool, error) {
		if n == 1 {
			return false, errLostReply
		}
		if n == g.gateRun {
			close(g.started)
			select {
			case <-g.gate:
			case <-time.After(5 * time.Second):
			}
		}
		return true, nil
	}}
	return g
}

// gate is a reconciler whose answer the test sets; while blocking is set, a
// check waits until the test opens the gate (a slow status API).
type gate struct {
	mu       sync.Mutex
	answer   reconcile.Answer
	blocking bool
	entered  chan struct{}
	open     chan struct{}
}

func (g *gate) set(ans reconcile.Answer, block bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.answer, g.blocking = ans, block
	if block {
		g.entered, g.open = make(chan struct{}), make(chan struct{})
	}
}

func (g *gate) Check(ctx context.Context, req reconcile.Request) reconcile.Answer {
	g.mu.Lock()
	ans, block, entered, open := g.answer, g.blocking, g.entered, g.open
	g.blocking = false // only the first check waits
	g.mu.Unlock()
	if block {
		close(entered)
		<-open
	}
	return ans
}

// jumpClock is the wall clock moved ahead by the test: leases, waits and
// timeouts run in real time, and a test skips past a hold (NoticeHold)
// without sleeping.
type jumpClock struct {
	mu    sync.Mutex
	ahead time.Duration
}

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.ahead)
}

func (c *jumpClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.ahead += d
	c.mu.Unlock()
}

// untilLeaseLapses waits until the lease the store records for key has
// ended on the wall clock, and grace after it (the time a request of the
// holder may still be in flight).
func untilLeaseLapses(t *testing.T, store agenttool.Store, key string, grace time.Duration) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rec, err := store.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		end := rec.LeaseExpiry.Add(grace)
		if time.Now().After(end) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of %s never lapsed (it ends %s)", key, rec.LeaseExpiry)
		}
		time.Sleep(time.Until(end) + time.Millisecond) // until the end the store records, then read it again
	}
}

// pgReplicas returns a function that opens one more replica of one
// PostgreSQL store — a store of its own, on one new schema — closed when
// the test ends.
func pgReplicas(t *testing.T) func() agenttool.Store {
	url := pgtest.URL(t)
	schema := pgtest.Schema(t, url)
	return func() agenttool.Store {
		s, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// TestMain gives the PostgreSQL tests a server (pgtest.Main).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// lookup is a destination's status search the test steers per reference:
// what it answers for a ref (StillPending when nothing is set).
type lookup struct {
	mu sync.Mutex
	m  map[string]reconcile.Answer
}

func (l *lookup) set(ref string, a reconcile.Answer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]reconcile.Answer{}
	}
	l.m[ref] = a
}

func (l *lookup) check(_ context.Context, ref string) reconcile.Answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.m[ref]; ok {
		return a
	}
	return reconcile.StillPending()
}

func errMsg(e envelope.Envelope) string {
	if e.Error == nil {
		return ""
	}
	return e.Error.Code + " " + e.Error.Message
}

// lunchScene is where the tests of a late answer about a replaced action
// start: an at-most-once email tool (AttemptTimeout 30s, ClockSkew 1s,
// one attempt a call, a manual clock) whose server delivers the first
// email it is sent and loses every reply. A (lunch, conversation-9) came
// back unknown; a person found it not applied (wrongly) once it could no
// longer land, so that the next write of its scope goes on in its place.
type lunchScene struct {
	clk  *clock
	m    *mailServer
	tool *agenttool.Tool
	op   *agenttool.Operator
	a    envelope.Envelope
}

// lunchFoundNotApplied sets the scene on opts.Store, with opts' Fence,
// Approver and the like.
func lunchFoundNotApplied(t *testing.T, opts agenttool.Options) lunchScene {
	t.Helper()
	s := lunchScene{clk: newClock(), m: &mailServer{script: sentThenNotSent}}
	opts.Class, opts.Now, opts.AttemptTimeout, opts.ClockSkew = agenttool.AtMostOnce, s.clk.Now, 30*time.Second, time.Second
	opts.Retry = agenttool.RetryPolicy{MaxAttempts: 1}
	s.tool = newEmailTool(t, s.m, opts)
	op, err := agenttool.NewOperator(opts.Store, s.tool)
	if err != nil {
		t.Fatal(err)
	}
	s.op = op
	s.a = s.tool.Invoke(scoped(), lunch)
	mustStatus(t, s.a, envelope.UnknownOutcome)
	s.clk.Advance(32 * time.Second)
	if err := op.ResolveNotApplied(context.Background(), s.a.RequestRef, 1, "maria", "not in the mail log"); err != nil {
		t.Fatal(err)
	}
	return s
}

// threeLunches makes, on store, a chain of three wordings of one email in
// conversation-9, each in the place of the one before: the first
// (refs[0]) delivered, the others not, every reply lost, the first two
// found not applied (wrongly, for the first) by a person once they could
// no longer land; the third is unknown. At-most-once, AttemptTimeout 30s,
// ClockSkew 1s, one attempt a call, a manual clock.
func threeLunches(t *testing.T, store agenttool.Store) (*clock, *mailServer, *agenttool.Tool, *agenttool.Operator, []string) {
	t.Helper()
	return lunchesDelivered(t, store, 1)
}

// lunchesDelivered is threeLunches with the first delivered ones
// delivered (their replies lost all the same).
func lunchesDelivered(t *testing.T, store agenttool.Store, delivered int) (*clock, *mailServer, *agenttool.Tool, *agenttool.Operator, []string) {
	t.Helper()
	clk := newClock()
	m := &mailServer{script: func(n int) (bool, error) { return n <= delivered, errLostReply }}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Now: clk.Now,
		AttemptTimeout: 30 * time.Second, ClockSkew: time.Second, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, input := range []string{lunch, lunchRephrased, lunchRephrased2} {
		e := tool.Invoke(scoped(), input)
		mustStatus(t, e, envelope.UnknownOutcome)
		refs = append(refs, e.RequestRef)
		if input != lunchRephrased2 {
			clk.Advance(32 * time.Second)
			if err := op.ResolveNotApplied(context.Background(), e.RequestRef, 1, "maria", "not in the mail log"); err != nil {
				t.Fatal(err)
			}
		}
	}
	return clk, m, tool, op, refs
}

// mustBeTrue checks that env, a call of a send_email tool sending to m, told the
// truth when it was answered (I2): success ⇒ sent once; a definite failure
// ⇒ not sent, unless it says that the call did nothing and nothing of the
// action (NoteNotThisCall) or that an earlier call did it; unknown_outcome
// ⇒ a record of the action awaits reconciliation or holds it.
func mustBeTrue(t *testing.T, what string, env envelope.Envelope, m interface{ sent(ref string) int }, store agenttool.Store) {
	t.Helper()
	ref := env.RequestRef
	switch env.Status {
	case envelope.Success:
		if n := m.sent(ref); n != 1 {
			t.Errorf("%s: success, and %s was sent %d times: %s", what, ref, n, env)
		}
	case envelope.DefiniteFailure:
		switch {
		case strings.HasPrefix(env.Note, agenttool.NoteNotThisCall):
		case env.Earlier != nil && env.Earlier.State == envelope.ActionSucceeded:
		default:
			if n := m.sent(ref); n != 0 {
				t.Errorf("%s: definite_failure, and %s was sent %d times: %s", what, ref, n, env)
			}
		}
	case envelope.UnknownOutcome:
		uref, _ := env.UnknownRef()
		if rec, err := store.Get(context.Background(), uref); err != nil || (rec.State != agenttool.Pending && rec.State != agenttool.Unknown) {
			t.Errorf("%s: unknown_outcome, and the record of %s is %v (%v): %s", what, uref, rec.State, err, env)
		}
	}
}
