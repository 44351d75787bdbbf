package temporaltool_test

import (
	"context"
	"errors"
	"strings"
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
			// A person approves minutes later, in the workflow's time, when
			// attempt 1 can no longer land: the tool's clock moves on too.
			var later atomic.Int64
			o.Now = func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
			var first atomic.Pointer[envelope.Envelope]
			o.Hooks.Outcome = func(_ context.Context, e agenttool.OutcomeEvent) {
				first.CompareAndSwap(nil, &e.Envelope)
			}
			a := mustActivity(t, l.tool(t, o))
			env := newEnv(t, a)
			signal := func(after time.Duration, edit func(*temporaltool.Approval)) {
				env.RegisterDelayedCallback(func() {
					f := first.Load()
					later.Store(int64(after))
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

// The package doc's approval loop, with the default identity (ByStep) and
// no Call.Step: the order is taken but its reply is lost (unknown_outcome,
// ask_human); a person approves that action by its reference; the loop
// calls again with the approval. Under ByStep without Call.Step, that call
// is a new activity, so a new action under a new key: the approval (for
// the first reference) is never consulted, and nothing stands in the way
// of a second order. An approval can only ever be about the action of a
// named step, so a ByStep call that carries one without Call.Step must be
// refused before anything runs.
func TestApprovalNeverRunsAnotherStep(t *testing.T) {
	l := newLedger(false)
	o := l.options(agenttool.AtMostOnce, memstore.New())
	o.Approver = temporaltool.WorkflowApprover{}
	var first atomic.Pointer[envelope.Envelope]
	o.Hooks.Outcome = func(_ context.Context, e agenttool.OutcomeEvent) {
		first.CompareAndSwap(nil, &e.Envelope)
	}
	var n atomic.Int32
	place := func(ctx context.Context, in order) (placed, error) {
		p, err := l.place(ctx, in)
		if n.Add(1) == 1 && err == nil {
			return placed{}, envelope.MarkUnknown(context.DeadlineExceeded) // taken; the reply is lost
		}
		return p, err
	}
	tool, err := agenttool.New("place_order", "Place one order.", place, o)
	if err != nil {
		t.Fatal(err)
	}
	a := mustActivity(t, tool)
	env := newEnv(t, a)
	env.RegisterDelayedCallback(func() {
		f := first.Load()
		env.SignalWorkflow("approval", temporaltool.Approval{RequestRef: f.RequestRef, Decision: temporaltool.RetryOnce,
			By: "ana", Attempts: f.Attempts})
	}, time.Minute)
	wf := func(ctx workflow.Context, c temporaltool.Call) ([]envelope.Envelope, error) {
		var out []envelope.Envelope
		env, err := temporaltool.Execute(ctx, a, c)
		for err == nil && env.Status == envelope.UnknownOutcome && env.Next == envelope.AskHuman && len(out) < 3 {
			out = append(out, env)
			var ok temporaltool.Approval
			workflow.GetSignalChannel(ctx, "approval").Receive(ctx, &ok)
			c.Approval = &ok
			env, err = temporaltool.Execute(ctx, a, c)
		}
		if err != nil {
			if errors.Is(err, temporaltool.ErrConfig) && strings.Contains(err.Error(), "Call.Step") {
				return out, nil // refused, naming the fix: nothing ran
			}
			return out, err
		}
		return append(out, env), nil
	}
	envs := run(t, env, wf, temporaltool.Call{Args: tea, Principal: "tenant-42/user-7"}) // Identity: the default
	for _, e := range envs[1:] {
		if e.RequestRef != envs[0].RequestRef {
			t.Errorf("the approved call met another action %s, not the approved %s", e.RequestRef, envs[0].RequestRef)
		}
	}
	l.check(t, 1)
}

// An approved retry whose worker dies after the order is taken (the tool
// panics) is retried by Temporal with the same Call, the same approval in
// it. The approval allowed one attempt, and that attempt was made: the
// retry must not make another.
func TestApprovalReplayedByTemporalRetryAllowsNothing(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			l := newLedger(false)
			l.lose, l.crash = 1, 1 // the first request is lost; the approved one is taken and its worker dies
			o := l.options(agenttool.AtMostOnce, memstore.New())
			o.Approver = temporaltool.WorkflowApprover{}
			// A person approves minutes later, in the workflow's time, when
			// attempt 1 can no longer land: the tool's clock moves on too.
			var later atomic.Int64
			o.Now = func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
			var first atomic.Pointer[envelope.Envelope]
			o.Hooks.Outcome = func(_ context.Context, e agenttool.OutcomeEvent) {
				first.CompareAndSwap(nil, &e.Envelope)
			}
			a := mustActivity(t, l.tool(t, o))
			env := newEnv(t, a)
			env.RegisterDelayedCallback(func() {
				f := first.Load()
				later.Store(int64(time.Minute))
				env.SignalWorkflow("approval", temporaltool.Approval{RequestRef: f.RequestRef, Decision: temporaltool.RetryOnce,
					By: "ana", Attempts: f.Attempts})
			}, time.Minute)
			c := call(tea, mode)
			if mode == temporaltool.ByStep {
				c.Step = "order"
			}
			wf := func(ctx workflow.Context, c temporaltool.Call) ([]envelope.Envelope, error) {
				e1, err := temporaltool.Execute(ctx, a, c)
				if err != nil {
					return nil, err
				}
				var ok temporaltool.Approval
				workflow.GetSignalChannel(ctx, "approval").Receive(ctx, &ok)
				c.Approval = &ok
				e2, err := temporaltool.Execute(ctx, a, c)
				return []envelope.Envelope{e1, e2}, err
			}
			envs := run(t, env, wf, c)
			want(t, envs[1], envelope.UnknownOutcome, "")
			l.check(t, 1)
		})
	}
}
