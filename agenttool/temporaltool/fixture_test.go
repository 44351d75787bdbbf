package temporaltool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// order is place_order's input; placed its result.
type order struct {
	Item string `json:"item"`
	Qty  int    `json:"qty"`
}

type placed struct {
	ID string `json:"id"`
}

// Calls in the model's words.
const (
	tea    = `{"item":"tea","qty":2}`
	teaAgn = `{"qty":2,"item":"tea"}` // the same action, members reordered
	coffee = `{"item":"coffee","qty":1}`
)

// ledger is the destination: it counts every order it takes, by request
// reference. A keyed ledger honours the reference as an idempotency key
// (a second request under it is answered with the first one's order);
// any other takes every request it gets, so a second run of one action
// shows as a second effect. A ledger is safe for concurrent use.
type ledger struct {
	keyed bool

	mu      sync.Mutex
	effects map[string]int    // request reference → orders taken
	ids     map[string]string // request reference → the order's id
	total   int
	// crash is how many of the next requests die after the order is
	// taken: the tool panics, as a worker lost after the effect and
	// before its outcome is recorded; the activity attempt fails without
	// a reply, and the record stays pending under a lease nobody renews.
	crash int
	// lose is how many of the next requests are lost before they arrive,
	// with an error that cannot tell (the connection was reset).
	lose int
	// hold, if set, makes every request wait on it after the order is
	// taken, while the call keeps its lease: a worker stalled with the
	// effect done.
	hold chan struct{}
	// runs counts requests, taken or not; running and most measure
	// requests in flight at once.
	runs, running, most int
	// meet, if set, makes each request wait until meet requests are in
	// flight at once (or a second passes): a barrier that only calls
	// running side by side pass.
	meet int
	// slow makes each request take this long.
	slow time.Duration
}

func newLedger(keyed bool) *ledger {
	return &ledger{keyed: keyed, effects: map[string]int{}, ids: map[string]string{}}
}

func (l *ledger) place(ctx context.Context, in order) (placed, error) {
	ref := agenttool.RequestRef(ctx)
	l.mu.Lock()
	l.runs++
	l.running++
	l.most = max(l.most, l.running)
	meet, slow := l.meet, l.slow
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.running--
		l.mu.Unlock()
	}()
	if meet > 0 {
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			l.mu.Lock()
			n := l.running
			l.mu.Unlock()
			if n >= meet {
				break
			}
		}
	}
	time.Sleep(slow)

	l.mu.Lock()
	if l.lose > 0 {
		l.lose--
		l.mu.Unlock()
		return placed{}, envelope.MarkUnknown(errors.New("the connection was reset"))
	}
	if l.keyed && l.effects[ref] > 0 {
		id := l.ids[ref]
		l.mu.Unlock()
		agenttool.DestinationReplayed(ctx)
		return placed{ID: id}, nil
	}
	l.effects[ref]++
	l.total++
	id := fmt.Sprintf("order-%d", l.total)
	l.ids[ref] = id
	crash := l.crash > 0
	if crash {
		l.crash--
	}
	hold := l.hold
	l.mu.Unlock()
	if crash {
		panic("the worker was lost after the order was taken")
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done(): // cut after the order was taken: the reply is lost
			return placed{}, ctx.Err()
		}
	}
	return placed{ID: id}, nil
}

// status answers a reconciler's question by request reference.
func (l *ledger) status(_ context.Context, ref string) reconcile.Answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.effects[ref] > 0 {
		b, _ := json.Marshal(placed{ID: l.ids[ref]})
		return reconcile.AppliedWith(b)
	}
	return reconcile.NotAppliedFenced()
}

// check fails t unless the ledger took want orders, none twice.
func (l *ledger) check(t *testing.T, want int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total != want {
		t.Errorf("the ledger took %d orders, want %d", l.total, want)
	}
	for ref, n := range l.effects {
		if n > 1 {
			t.Errorf("action %s was ordered %d times", ref, n)
		}
	}
}

func (l *ledger) stats() (runs, most int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs, l.most
}

// options are place_order's options for class over store: Temporal owns
// the retries (one attempt per call), with times short enough for tests.
func (l *ledger) options(class agenttool.Class, store agenttool.Store) agenttool.Options {
	o := agenttool.Options{
		Store: store, Class: class,
		Retry:          agenttool.RetryPolicy{MaxAttempts: 1},
		AttemptTimeout: 2 * time.Second,
		Lease:          time.Second,
		WaitTimeout:    3 * time.Second,
		CheckTimeout:   time.Second,
		StoreTimeout:   time.Second,
		ClockSkew:      -1, // one process, one clock
	}
	if class == agenttool.Reconcilable {
		o.Reconciler = reconcile.Func(l.status)
	}
	return o
}

func (l *ledger) tool(t *testing.T, o agenttool.Options) *agenttool.Tool {
	t.Helper()
	tool, err := agenttool.New("place_order", "Place one order.", l.place, o)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// activity returns place_order over l, of class, in a store of its own,
// as an activity.
func (l *ledger) activity(t *testing.T, class agenttool.Class) *temporaltool.Activity {
	t.Helper()
	return mustActivity(t, l.tool(t, l.options(class, memstore.New())))
}

func mustActivity(t *testing.T, tool *agenttool.Tool) *temporaltool.Activity {
	t.Helper()
	a, err := temporaltool.New(tool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// boltStore is a durable store in a test's directory.
func boltStore(t *testing.T) agenttool.Store {
	t.Helper()
	s, err := boltstore.Open(t.TempDir()+"/retrysafe.db", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newEnv returns a test workflow environment with the activity
// registered and a quiet logger.
func newEnv(t *testing.T, acts ...*temporaltool.Activity) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	for _, a := range acts {
		a.Register(env)
	}
	return env
}

// calls is a workflow that runs its calls one after the other through
// Execute and returns their envelopes.
func calls(a *temporaltool.Activity) func(ctx workflow.Context, cs []temporaltool.Call) ([]envelope.Envelope, error) {
	return func(ctx workflow.Context, cs []temporaltool.Call) ([]envelope.Envelope, error) {
		var out []envelope.Envelope
		for _, c := range cs {
			env, err := temporaltool.Execute(ctx, a, c)
			if err != nil {
				return out, err
			}
			out = append(out, env)
		}
		return out, nil
	}
}

// run runs wf in env with args and returns its envelopes.
func run(t *testing.T, env *testsuite.TestWorkflowEnvironment, wf any, args ...any) []envelope.Envelope {
	t.Helper()
	out, err := execute(env, wf, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range out {
		t.Logf("envelope: %s", e)
		if err := e.Validate(); err != nil {
			t.Errorf("invalid envelope: %v", err)
		}
	}
	return out
}

// execute is run for a goroutine other than the test's.
func execute(env *testsuite.TestWorkflowEnvironment, wf any, args ...any) ([]envelope.Envelope, error) {
	env.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: "wf"})
	env.ExecuteWorkflow("wf", args...)
	if !env.IsWorkflowCompleted() {
		return nil, errors.New("the workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		return nil, fmt.Errorf("the workflow failed: %w", err)
	}
	var out []envelope.Envelope
	if err := env.GetWorkflowResult(&out); err != nil {
		return nil, err
	}
	return out, nil
}

func call(args string, mode temporaltool.Identity) temporaltool.Call {
	return temporaltool.Call{Args: args, Principal: "tenant-42/user-7", Identity: mode}
}

// want fails t unless env has status and, if code is not empty, code.
func want(t *testing.T, env envelope.Envelope, status envelope.Status, code string) {
	t.Helper()
	got := ""
	if env.Error != nil {
		got = env.Error.Code
	}
	if env.Status != status || (code != "" && got != code) {
		t.Errorf("envelope %s: want %s %s", env, status, code)
	}
}

// starts counts the guarded calls of a tool (Hooks.Start), to tell how
// many attempts Temporal made.
func starts(o *agenttool.Options) *atomic.Int32 {
	var n atomic.Int32
	o.Hooks.Start = func(ctx context.Context, _ agenttool.StartEvent) context.Context {
		n.Add(1)
		return ctx
	}
	return &n
}

var modes = []temporaltool.Identity{temporaltool.ByInput, temporaltool.ByStep}
