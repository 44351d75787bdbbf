package temporaltool_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
)

// A retry that Temporal starts while the first attempt still runs — the
// first worker stalled past its heartbeat timeout with the order taken —
// does not act again blind: it finds the first attempt's live lease,
// waits, answers in_progress (a retryable error: it did nothing) and is
// retried until the first attempt has recorded its outcome, which it then
// replays. One order.
//
// The SDK's test environment retries an attempt only after it has
// returned, so it cannot start the overlapping retry itself. The test
// builds it from two concurrent invocations of one activity — the same
// workflow, run ID and activity ID, so the same key — in two test
// environments sharing one store: the stalled attempt in the first, and
// in the second the retry with its own retries.
func TestStalledAttemptIsNotActedOnBlind(t *testing.T) {
	for _, class := range []agenttool.Class{agenttool.Keyed, agenttool.Reconcilable, agenttool.AtMostOnce} {
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%v/%s", class, mode), func(t *testing.T) {
				t.Parallel()
				l := newLedger(class == agenttool.Keyed)
				l.hold = make(chan struct{})
				o := l.options(class, memstore.New())
				o.WaitTimeout = 300 * time.Millisecond
				var inProgress atomic.Int32
				var release sync.Once
				o.Hooks.Outcome = func(_ context.Context, e agenttool.OutcomeEvent) {
					if e.Envelope.Error != nil && e.Envelope.Error.Code == envelope.CodeInProgress && inProgress.Add(1) == 2 {
						release.Do(func() { close(l.hold) }) // the stalled worker goes on, after the retry has waited twice
					}
				}
				a := mustActivity(t, l.tool(t, o))
				c := []temporaltool.Call{call(tea, mode)}

				var first []envelope.Envelope
				var firstErr error
				done := make(chan struct{})
				env := newEnv(t, a)
				go func() {
					defer close(done)
					first, firstErr = execute(env, calls(a), c)
				}()
				for runs, _ := l.stats(); runs == 0; runs, _ = l.stats() {
					select { // the first attempt takes the order, and stalls
					case <-done:
						t.Fatalf("the first workflow ended before its attempt stalled: %v", firstErr)
					case <-time.After(5 * time.Millisecond):
					}
				}
				retry := run(t, newEnv(t, a), calls(a), c)
				<-done
				if firstErr != nil {
					t.Fatal(firstErr)
				}
				t.Logf("the stalled attempt's envelope: %s", first[0])

				want(t, first[0], envelope.Success, "")
				if first[0].Replayed {
					t.Errorf("the stalled attempt's own success says replayed: %s", first[0])
				}
				want(t, retry[0], envelope.Success, "")
				if !retry[0].Replayed {
					t.Errorf("the retry's success does not say replayed: %s", retry[0])
				}
				if retry[0].RequestRef != first[0].RequestRef || string(retry[0].Result) != string(first[0].Result) {
					t.Errorf("the retry answers %s, not the stalled attempt's action %s", retry[0], first[0])
				}
				if n := inProgress.Load(); n < 2 {
					t.Errorf("the retry answered in_progress %d times: it did not wait for the stalled attempt", n)
				}
				if runs, _ := l.stats(); runs != 1 {
					t.Errorf("the tool ran %d times", runs)
				}
				l.check(t, 1)
			})
		}
	}
}
