package temporaltool_test

import (
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
)

// parallel is a workflow that starts all its calls at once and then
// waits for each.
func parallel(a *temporaltool.Activity) func(ctx workflow.Context, cs []temporaltool.Call) ([]envelope.Envelope, error) {
	return func(ctx workflow.Context, cs []temporaltool.Call) ([]envelope.Envelope, error) {
		fs := make([]*temporaltool.Future, len(cs))
		for i, c := range cs {
			fs[i] = temporaltool.Start(ctx, a, c)
		}
		out := make([]envelope.Envelope, len(cs))
		for i, f := range fs {
			env, err := f.Get(ctx)
			if err != nil {
				return nil, err
			}
			out[i] = env
		}
		return out, nil
	}
}

// Two steps of one tool started in parallel run side by side: each step
// is a session of its own, so the tool's one-write-at-a-time fence does
// not serialise them. The ledger lets a request through only when both
// are in flight at once, within a second: run one after the other, the
// first would wait alone, and the test would see one in flight at most.
func TestStepsRunInParallel(t *testing.T) {
	l := newLedger(false)
	l.meet = 2
	a := l.activity(t, agenttool.AtMostOnce)
	envs := run(t, newEnv(t, a), parallel(a), []temporaltool.Call{call(tea, temporaltool.ByStep), call(coffee, temporaltool.ByStep)})
	for _, env := range envs {
		want(t, env, envelope.Success, "")
	}
	if _, most := l.stats(); most != 2 {
		t.Errorf("at most %d request in flight at once: the steps did not overlap", most)
	}
	l.check(t, 2)
}

// ByInput keeps the fence: two different orders of one tool started
// in parallel in one conversation both run, one after the other (in an
// agent loop they may be one action in other words).
func TestAgentCallsOfOneToolRunOneAtATime(t *testing.T) {
	l := newLedger(false)
	l.slow = 100 * time.Millisecond
	a := l.activity(t, agenttool.AtMostOnce)
	envs := run(t, newEnv(t, a), parallel(a), []temporaltool.Call{call(tea, temporaltool.ByInput), call(coffee, temporaltool.ByInput)})
	for _, env := range envs {
		want(t, env, envelope.Success, "")
	}
	if _, most := l.stats(); most != 1 {
		t.Errorf("%d requests in flight at once in one conversation", most)
	}
	l.check(t, 2)
}

// A step whose outcome is unknown holds back no other step of the tool;
// in agent mode, an order after an unknown one waits for it to be
// settled (the unknown fence), since it may be the same order reworded.
func TestUnknownStepHoldsBackNoOther(t *testing.T) {
	for _, tc := range []struct {
		mode temporaltool.Identity
		next envelope.Status
		code string
	}{
		{temporaltool.ByStep, envelope.Success, ""},
		{temporaltool.ByInput, envelope.UnknownOutcome, envelope.CodeEarlierUnknown},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			l := newLedger(false)
			l.lose = 1
			a := l.activity(t, agenttool.AtMostOnce)
			envs := run(t, newEnv(t, a), calls(a), []temporaltool.Call{call(tea, tc.mode), call(coffee, tc.mode)})
			want(t, envs[0], envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
			want(t, envs[1], tc.next, tc.code)
		})
	}
}
