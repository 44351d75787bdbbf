package temporaltool_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
)

// approvals is a workflow that runs its call, and while the call's
// outcome is unknown and waits for a person, waits for the person's
// signal and runs it again with the approval.
func approvals(a *temporaltool.Activity) func(ctx workflow.Context, c temporaltool.Call) ([]envelope.Envelope, error) {
	return func(ctx workflow.Context, c temporaltool.Call) ([]envelope.Envelope, error) {
		signals := workflow.GetSignalChannel(ctx, "approval")
		var out []envelope.Envelope
		for len(out) < 5 {
			env, err := temporaltool.Execute(ctx, a, c)
			if err != nil {
				return out, err
			}
			out = append(out, env)
			if env.Status != envelope.UnknownOutcome || env.Next != envelope.AskHuman {
				break
			}
			var ok temporaltool.Approval
			signals.Receive(ctx, &ok)
			c.Approval = &ok
		}
		return out, nil
	}
}

// A person's signal reaches the Approver of an AtMostOnce tool, bound to
// the outcome as agenttool's approvals are: an approval for another
// action, or for another attempt of this one, allows nothing; the one
// given for this outcome allows exactly one more attempt. The order whose
// request was lost before it arrived is taken once.
func TestApprovalBySignal(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			l := newLedger(false)
			l.lose = 1
			o := l.options(agenttool.AtMostOnce, memstore.New())
			o.Approver = temporaltool.WorkflowApprover{}
			var first atomic.Pointer[envelope.Envelope]
			o.Hooks.Outcome = func(_ context.Context, e agenttool.OutcomeEvent) {
				first.CompareAndSwap(nil, &e.Envelope)
			}
			a := mustActivity(t, l.tool(t, o))
			env := newEnv(t, a)
			signal := func(after time.Duration, edit func(*temporaltool.Approval)) {
				env.RegisterDelayedCallback(func() {
					f := first.Load()
					ok := temporaltool.Approval{RequestRef: f.RequestRef, Decision: temporaltool.RetryOnce, By: "ana",
						Reason: "the ledger has no such order", Attempts: f.Attempts}
					edit(&ok)
					env.SignalWorkflow("approval", ok)
				}, after)
			}
			signal(time.Minute, func(ok *temporaltool.Approval) { ok.RequestRef = "place_order/another" })
			signal(2*time.Minute, func(ok *temporaltool.Approval) { ok.Attempts++ })
			signal(3*time.Minute, func(*temporaltool.Approval) {})
			c := call(tea, mode)
			if mode == temporaltool.ByStep {
				c.Step = "order" // a step the workflow calls again meets its key
			}
			envs := run(t, env, approvals(a), c)

			if len(envs) != 4 {
				t.Fatalf("%d envelopes, want 4: unknown, not approved twice, then approved", len(envs))
			}
			for _, e := range envs[:3] {
				want(t, e, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
				if e.RequestRef != envs[0].RequestRef {
					t.Errorf("a later call met another action: %s", e)
				}
			}
			want(t, envs[3], envelope.Success, "")
			l.check(t, 1)
		})
	}
}
