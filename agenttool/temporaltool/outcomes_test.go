package temporaltool_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
)

// downStore fails its next claims, as a store that cannot be reached.
type downStore struct {
	agenttool.Store
	down atomic.Int32 // claims still to fail
}

func (s *downStore) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if s.down.Add(-1) >= 0 {
		return storekit.ClaimResult{}, errors.New("the store cannot be reached")
	}
	return s.Store.Claim(ctx, req)
}

// An attempt that could not claim its key did nothing: it is a retryable
// error, and Temporal's retry policy sends it again under the same key.
// When Temporal's retries end on such an answer, the workflow gets it as
// it is if it was the only attempt's, and unknown_outcome otherwise: an
// earlier attempt may have acted, and may still, on a worker Temporal
// gave up on.
func TestNotDoneIsRetriedByTemporal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		down     int32
		attempts int32 // MaximumAttempts; 0: no count
		status   envelope.Status
		code     string
		orders   int
	}{
		{"the store comes back", 2, 0, envelope.Success, "", 1},
		{"one attempt, the store down", 100, 1, envelope.DefiniteFailure, envelope.CodeStoreUnavailable, 0},
		{"three attempts, the store down", 100, 3, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger(false)
			store := &downStore{Store: memstore.New()}
			store.down.Store(tc.down)
			o := l.options(agenttool.AtMostOnce, store)
			n := starts(&o)
			a := mustActivity(t, l.tool(t, o))
			wf := func(ctx workflow.Context, c temporaltool.Call) ([]envelope.Envelope, error) {
				opts := a.ActivityOptions()
				opts.RetryPolicy = &temporal.RetryPolicy{MaximumAttempts: tc.attempts}
				env, err := temporaltool.Execute(workflow.WithActivityOptions(ctx, opts), a, c)
				return []envelope.Envelope{env}, err
			}
			env := run(t, newEnv(t, a), wf, call(tea, temporaltool.ByInput))[0]
			want(t, env, tc.status, tc.code)
			if tc.attempts > 1 && !strings.Contains(env.Error.Message, "attempt 3") {
				t.Errorf("the unknown outcome does not say which attempt: %s", env)
			}
			wantCalls := tc.attempts
			if wantCalls == 0 {
				wantCalls = tc.down + 1
			}
			if got := n.Load(); got != wantCalls {
				t.Errorf("the tool was called %d times, want %d: one per attempt", got, wantCalls)
			}
			l.check(t, tc.orders)
		})
	}
}

// A workflow that stops waiting for a call while its attempt runs (it is
// cancelled) cannot know what the attempt did: the order was taken, and
// the workflow hears unknown_outcome — never a failure — with guidance
// that holds: the same call again meets the same action.
func TestCancelledWhileRunningIsUnknown(t *testing.T) {
	l := newLedger(false)
	l.hold = make(chan struct{})
	a := l.activity(t, agenttool.AtMostOnce)
	wf := func(ctx workflow.Context, c temporaltool.Call) ([]envelope.Envelope, error) {
		cctx, cancel := workflow.WithCancel(ctx)
		f := temporaltool.Start(cctx, a, c)
		workflow.Go(ctx, func(ctx workflow.Context) {
			_ = workflow.Sleep(ctx, 200*time.Millisecond)
			cancel()
		})
		env, err := f.Get(ctx)
		return []envelope.Envelope{env}, err
	}
	env := run(t, newEnv(t, a), wf, call(tea, temporaltool.ByInput))[0]
	want(t, env, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
	if env.Next != envelope.Wait {
		t.Errorf("next %s, want wait: calling again with the same input meets the same action", env.Next)
	}
	l.check(t, 1)
}
