package temporaltool_test

// At most one effect per action when Temporal runs the tool at least
// once: a worker lost after the effect, copies of one call at once, a
// rewording after unknown_outcome, and a later attempt on a worker of
// another build that refuses to run. (From a fresh-context review.)

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
)

// outcome is what a workflow saw of one Execute: the envelope, or
// the error Execute returned (which, by the package doc, means "nothing
// ran").
type outcome struct {
	Env envelope.Envelope `json:"env"`
	Err string            `json:"err,omitempty"`
}

// A rolling deploy: attempt 1 of an activity runs on a worker with the
// old build of the tool, takes the order, and the worker dies before it
// answers; Temporal retries on a worker with the new build, whose tool
// settings no longer fit the activity's timeouts (its AttemptTimeout
// grew), so attempt 2 refuses to run (ErrorTypeConfig, not retryable).
// Execute's error is documented as "not nil only when nothing ran"; the
// order was taken by attempt 1. The workflow must hear unknown_outcome
// (an earlier attempt may have acted), as it does for every other
// refusal of a later attempt (tooLate, NotDone).
func TestOneEffect_RefusalOfALaterAttemptIsNotNothingRan(t *testing.T) {
	// The refusal of this build, and of a build before refusals said
	// their attempt's number.
	for _, older := range []bool{false, true} {
		t.Run(fmt.Sprintf("older=%v", older), func(t *testing.T) {
			l := newLedger(false)
			l.crash = 1 // attempt 1 takes the order, and its worker dies
			store := memstore.New()
			oldAct := mustActivity(t, l.tool(t, l.options(agenttool.AtMostOnce, store)))
			newOpts := l.options(agenttool.AtMostOnce, store)
			newOpts.AttemptTimeout = 30 * time.Second // the new build's attempts may run longer
			newAct := mustActivity(t, l.tool(t, newOpts))

			env := newEnv(t) // the two builds share one activity name: a worker of each
			env.RegisterActivityWithOptions(func(ctx context.Context, c temporaltool.Call) (envelope.Envelope, error) {
				switch {
				case activity.GetInfo(ctx).Attempt == 1:
					return oldAct.Run(ctx, c)
				case older:
					return envelope.Envelope{}, temporal.NewApplicationErrorWithOptions("temporaltool: the configuration does not fit the tool: attempts may run 30s",
						temporaltool.ErrorTypeConfig, temporal.ApplicationErrorOptions{NonRetryable: true})
				}
				return newAct.Run(ctx, c)
			}, activity.RegisterOptions{Name: oldAct.Name()})

			wf := func(ctx workflow.Context, c temporaltool.Call) ([]outcome, error) {
				e, err := temporaltool.Execute(ctx, oldAct, c) // the workflow's build: the old timeouts
				o := outcome{Env: e}
				if err != nil {
					o.Err = err.Error()
				}
				return []outcome{o}, nil
			}
			env.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: "wf"})
			env.ExecuteWorkflow("wf", call(tea, temporaltool.ByInput))
			if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
				t.Fatalf("the workflow did not complete: %v", env.GetWorkflowError())
			}
			var got []outcome
			if err := env.GetWorkflowResult(&got); err != nil {
				t.Fatal(err)
			}
			l.check(t, 1)
			if got[0].Err != "" {
				t.Errorf("Execute returned an error that says nothing ran (%s), but attempt 1 took the order: "+
					"a refusal on attempt 2 must read as unknown_outcome", got[0].Err)
			} else {
				want(t, got[0].Env, envelope.UnknownOutcome, "")
			}
		})
	}
}

// Two activities of one ByInput conversation carry the same action (the
// model sent the same call twice in one message, the workflow started
// both at once), and the worker of the one that acts dies after taking
// the order. Temporal retries it; the other waits for the action. One
// order, and no copy says the order failed or names another action.
// (The SDK's test environment skips the retry's backoff in its mock
// clock, which also times out the waiting copy's heartbeat: that copy
// may end unknown_outcome without a reference, which is honest.)
func TestOneEffect_ParallelCopiesOfOneActionWithALostWorkerTakeOneOrder(t *testing.T) {
	for _, class := range []agenttool.Class{agenttool.Keyed, agenttool.Reconcilable, agenttool.AtMostOnce} {
		t.Run(class.String(), func(t *testing.T) {
			t.Parallel()
			l := newLedger(class == agenttool.Keyed)
			l.crash = 1
			l.slow = 50 * time.Millisecond
			o := l.options(class, boltStore(t))
			a := mustActivity(t, l.tool(t, o))
			envs := run(t, newEnv(t, a), parallel(a), []temporaltool.Call{call(tea, temporaltool.ByInput), call(teaAgn, temporaltool.ByInput)})
			if r0, r1 := envs[0].RequestRef, envs[1].RequestRef; r0 != "" && r1 != "" && r0 != r1 {
				t.Errorf("the copies met two actions: %s and %s", r0, r1)
			}
			for _, e := range envs {
				if e.Status == envelope.DefiniteFailure {
					t.Errorf("a copy answered definite_failure for a taken order: %s", e)
				}
				if class == agenttool.AtMostOnce && e.Status == envelope.Success {
					t.Errorf("an at-most-once copy answered success after its worker died unanswered: %s", e)
				}
			}
			l.check(t, 1)
		})
	}
}

// After an unknown outcome in a conversation, the model rewords the call
// (other identifying fields, so another key) in a later activity: the
// unknown fence holds it (earlier_action_unknown), Temporal does not
// retry that answer, and nothing is ordered again.
func TestOneEffect_RewordedCallAfterUnknownIsHeld(t *testing.T) {
	l := newLedger(false)
	l.lose = 0
	l.crash = 0
	o := l.options(agenttool.AtMostOnce, memstore.New())
	n := starts(&o)
	place := func(ctx context.Context, in order) (placed, error) {
		p, err := l.place(ctx, in)
		if err == nil && in.Item == "tea" {
			return placed{}, envelope.MarkUnknown(errors.New("the reply was lost")) // taken, reply lost
		}
		return p, err
	}
	tool, err := agenttool.New("place_order", "Place one order.", place, o)
	if err != nil {
		t.Fatal(err)
	}
	a := mustActivity(t, tool)
	envs := run(t, newEnv(t, a), calls(a), []temporaltool.Call{
		call(tea, temporaltool.ByInput),
		call(`{"item":"Tea ","qty":3}`, temporaltool.ByInput),
		call(tea, temporaltool.ByInput),
	})
	want(t, envs[0], envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
	want(t, envs[1], envelope.UnknownOutcome, envelope.CodeEarlierUnknown)
	want(t, envs[2], envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
	if envs[2].RequestRef != envs[0].RequestRef {
		t.Errorf("the repeat met another action: %s", envs[2])
	}
	if got := n.Load(); got != 3 {
		t.Errorf("the tool was called %d times, want 3: an unknown or held answer is never retried by Temporal", got)
	}
	l.check(t, 1)
}
