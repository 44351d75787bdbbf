package temporaltool_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
)

// execution is one execution of the child workflow: its ID, its calls,
// and how many times it continues as new, making the same calls again.
type execution struct {
	ID    string
	Calls []temporaltool.Call
	CAN   int
}

// identity runs the executions one after the other, as child workflows,
// and returns the envelopes of every call of every run, in order.
func identity(t *testing.T, mode temporaltool.Identity, execs []execution) ([]envelope.Envelope, *ledger) {
	t.Helper()
	l := newLedger(false)
	o := l.options(agenttool.AtMostOnce, memstore.New())
	var mu sync.Mutex
	var seen []envelope.Envelope
	o.Hooks.Outcome = func(_ context.Context, e agenttool.OutcomeEvent) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, e.Envelope)
	}
	a := mustActivity(t, l.tool(t, o))
	env := newEnv(t, a)
	child := func(ctx workflow.Context, cs []temporaltool.Call, can int) error {
		for _, c := range cs {
			if _, err := temporaltool.Execute(ctx, a, c); err != nil {
				return err
			}
		}
		if can > 0 {
			return workflow.NewContinueAsNewError(ctx, "child", cs, can-1)
		}
		return nil
	}
	env.RegisterWorkflowWithOptions(child, workflow.RegisterOptions{Name: "child"})
	parent := func(ctx workflow.Context, execs []execution) ([]envelope.Envelope, error) {
		for _, e := range execs {
			cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: e.ID})
			if err := workflow.ExecuteChildWorkflow(cctx, "child", e.Calls, e.CAN).Get(ctx, nil); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	run(t, env, parent, execs)
	for _, e := range seen {
		t.Logf("envelope: %s", e)
	}
	return seen, l
}

// ByStep: a workflow ID reused by a later execution names another
// execution, whose steps are new actions — the same order is taken again,
// not replayed. A run that continues as new begins its steps anew too
// (activity IDs start again in each run); a step named by the workflow
// (Call.Step) in a session it carries across the runs is one action, and
// is replayed.
func TestStepIdentity(t *testing.T) {
	step := call(tea, temporaltool.ByStep)
	named := step
	named.Step, named.Session = "charge", "order-7/carried"
	for _, tc := range []struct {
		name     string
		execs    []execution
		orders   int
		replayed bool // the last call's envelope
	}{
		{"workflow ID reused", []execution{{ID: "order-7", Calls: []temporaltool.Call{step}}, {ID: "order-7", Calls: []temporaltool.Call{step}}}, 2, false},
		{"continued as new", []execution{{ID: "order-7", Calls: []temporaltool.Call{step}, CAN: 1}}, 2, false},
		{"named step across continue-as-new", []execution{{ID: "order-7", Calls: []temporaltool.Call{named}, CAN: 1}}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen, l := identity(t, temporaltool.ByStep, tc.execs)
			if len(seen) != 2 {
				t.Fatalf("%d calls, want 2", len(seen))
			}
			for _, e := range seen {
				want(t, e, envelope.Success, "")
			}
			if last := seen[len(seen)-1]; last.Replayed != tc.replayed {
				t.Errorf("the second call says replayed %v, want %v", last.Replayed, tc.replayed)
			}
			l.check(t, tc.orders)
		})
	}
}

// A Call that names no identity is a step (ByStep): the same arguments in
// two activities of one workflow are two actions, and both act; under
// ByInput the second is the first replayed.
func TestACallIsAStepUnlessItSaysByInput(t *testing.T) {
	for _, tc := range []struct {
		identity temporaltool.Identity
		effects  int
	}{{"", 2}, {temporaltool.ByInput, 1}} {
		l := newLedger(true)
		a := l.activity(t, agenttool.Keyed)
		c := temporaltool.Call{Args: tea, Principal: "tenant-42/user-7", Identity: tc.identity}
		envs := run(t, newEnv(t, a), calls(a), []temporaltool.Call{c, c})
		for _, env := range envs {
			want(t, env, envelope.Success, "")
		}
		l.check(t, tc.effects)
		if replayed := envs[1].Replayed; replayed != (tc.effects == 1) {
			t.Errorf("identity %q: the second call replayed %v; want %v", tc.identity, replayed, tc.effects == 1)
		}
	}
}

// Under ByStep an unknown outcome's advice holds: a Keyed tool whose
// attempt took the order and lost its reply answers unknown_outcome,
// and its envelope says to call again with the same input only where
// that meets the same action. A workflow that does what the envelope
// says — a later activity, the same input, as a model would — must not
// make a second order.
func TestByStepUnknownOutcomeAdviceHolds(t *testing.T) {
	l := newLedger(true)
	l.hold = make(chan struct{}) // the order is taken, then the attempt runs out of time: the reply is lost
	o := l.options(agenttool.Keyed, memstore.New())
	o.AttemptTimeout = 200 * time.Millisecond
	a := mustActivity(t, l.tool(t, o))
	follow := func(ctx workflow.Context, c temporaltool.Call) ([]envelope.Envelope, error) {
		first, err := temporaltool.Execute(ctx, a, c)
		if err != nil || first.Status != envelope.UnknownOutcome || first.Next != envelope.Wait {
			return []envelope.Envelope{first}, err
		}
		close(l.hold)
		second, err := temporaltool.Execute(ctx, a, c) // what the envelope said to do
		return []envelope.Envelope{first, second}, err
	}
	envs := run(t, newEnv(t, a), follow, call(tea, temporaltool.ByStep))
	want(t, envs[0], envelope.UnknownOutcome, "")
	if envs[0].Next == envelope.Wait || strings.Contains(envs[0].Note, "is safe") {
		t.Errorf("the unknown outcome of a step says to call again: next %s, %q", envs[0].Next, envs[0].Note)
	}
	l.check(t, 1)
}
