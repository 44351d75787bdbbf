package temporaltool

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

func failure(status envelope.Status, code string, next envelope.Next) envelope.Envelope {
	return envelope.Envelope{Version: envelope.Version, Status: status, Tool: "place_order", RequestRef: "place_order/x",
		Error: &envelope.Error{Code: code, Message: "m"}, Next: next}
}

// What the activity returns for each answer of its call: every final
// answer as its result, unknown ones above all; only an answer that says
// the attempt did nothing is a retryable error, carrying the envelope and
// the attempt, and asking Temporal to wait as long as the envelope says.
func TestAnswerOfEachEnvelope(t *testing.T) {
	inProgress := failure(envelope.UnknownOutcome, envelope.CodeInProgress, envelope.Wait)
	inProgress.RetryAfter = 7
	for _, tc := range []struct {
		name  string
		env   envelope.Envelope
		retry bool
		delay time.Duration
	}{
		{"success", envelope.Envelope{Version: envelope.Version, Status: envelope.Success, Tool: "place_order", Attempts: 1, Next: envelope.Continue}, false, 0},
		{"a tool's refusal", failure(envelope.DefiniteFailure, envelope.CodeRejected, envelope.DoNotRetry), false, 0},
		{"a tool's refusal with the code unavailable", failure(envelope.DefiniteFailure, envelope.CodeUnavailable, envelope.DoNotRetry), false, 0},
		{"invalid input", failure(envelope.DefiniteFailure, envelope.CodeInvalidInput, envelope.FixInput), false, 0},
		{"unknown outcome, keyed (next wait)", failure(envelope.UnknownOutcome, envelope.CodeOutcomeUnknown, envelope.Wait), false, 0},
		{"unknown outcome, at most once", failure(envelope.UnknownOutcome, envelope.CodeOutcomeUnknown, envelope.AskHuman), false, 0},
		{"held by the unknown fence", failure(envelope.UnknownOutcome, envelope.CodeEarlierUnknown, envelope.DoNotRetry), false, 0},
		{"store unavailable", failure(envelope.DefiniteFailure, envelope.CodeStoreUnavailable, envelope.Wait), true, 0},
		{"destination unavailable", failure(envelope.DefiniteFailure, envelope.CodeUnavailable, envelope.Wait), true, 0},
		{"cancelled before the tool ran", failure(envelope.DefiniteFailure, envelope.CodeCancelled, envelope.Wait), true, 0},
		{"in progress, held by a stalled attempt", inProgress, true, 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := answer(context.Background(), tc.env, 3)
			if !tc.retry {
				if err != nil || got.Status != tc.env.Status {
					t.Fatalf("answer: %s, %v; want the envelope as the result", got, err)
				}
				return
			}
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || app.Type() != ErrorTypeNotDone || app.NonRetryable() || app.NextRetryDelay() != tc.delay {
				t.Fatalf("answer: %v; want a retryable %s error with NextRetryDelay %v", err, ErrorTypeNotDone, tc.delay)
			}
			var env envelope.Envelope
			var attempt int32
			if err := app.Details(&env, &attempt); err != nil || env.Error.Code != tc.env.Error.Code || attempt != 3 {
				t.Errorf("details: %s, attempt %d, %v", env, attempt, err)
			}
		})
	}
}

// A retry policy of one attempt needs no retry window; any other, or
// none told, needs one within the life of the action's record.
func TestRetryWindowWithoutRetries(t *testing.T) {
	tool, err := agenttool.New("place_order", "Place one order.", func(context.Context, struct{ Item string }) (string, error) { return "", nil },
		agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Retry: agenttool.RetryPolicy{MaxAttempts: 1}, AttemptTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(tool, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := a.Budget() + time.Minute
	if err := a.fits(long, 48*time.Hour, 1); err != nil {
		t.Errorf("one attempt, a long ScheduleToCloseTimeout: %v", err)
	}
	for _, n := range []int32{0, 2} {
		if err := a.fits(long, 48*time.Hour, n); !errors.Is(err, ErrConfig) {
			t.Errorf("MaximumAttempts %d, ScheduleToCloseTimeout 48h: %v, want ErrConfig", n, err)
		}
		if err := a.fits(long, 0, n); !errors.Is(err, ErrConfig) {
			t.Errorf("MaximumAttempts %d, no ScheduleToCloseTimeout: %v, want ErrConfig", n, err)
		}
	}
	if err := a.fits(a.ActivityOptions().StartToCloseTimeout, a.ActivityOptions().ScheduleToCloseTimeout, 0); err != nil {
		t.Errorf("the tool's own options: %v", err)
	}
}
