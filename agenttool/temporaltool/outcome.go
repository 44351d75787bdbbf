package temporaltool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrysafe/retrysafe/envelope"
)

// What the activity returns, and what the workflow makes of it.
//
//	the call answered                         the activity returns        the workflow gets
//	success, definite failure, unknown        the envelope, as result     the envelope
//	store_unavailable, unavailable,           ErrorTypeNotDone, retryable Temporal retries under the same key;
//	cancelled before the tool ran,            (envelope and attempt in    when its retries end: the envelope if
//	in_progress (nothing done by this         details; NextRetryDelay     it was the first attempt's (or
//	attempt)                                  from retry_after)           in_progress), else unknown_outcome
//	cancelled, and Temporal cancelled it      CanceledError (details)     the same
//	a timeout, a panic, a lost worker         —                           unknown_outcome
//	timeouts or Call that do not fit          ErrorTypeConfig             an error wrapping ErrConfig

// notDone reports whether env says that its call did nothing and that the
// same call may be sent again under the same key.
func notDone(env envelope.Envelope) bool {
	if env.Error == nil {
		return false
	}
	switch env.Status {
	case envelope.DefiniteFailure:
		switch env.Error.Code {
		case envelope.CodeStoreUnavailable, envelope.CodeUnavailable, envelope.CodeCancelled:
			// The wrapper's own codes, with next wait; a tool's definite
			// error that happens to use one has next do_not_retry.
			return env.Next == envelope.Wait
		}
	case envelope.UnknownOutcome:
		// Another call holds the action (or the scope's slot) and runs: this
		// one did nothing, and a retry meets what it became.
		return env.Error.Code == envelope.CodeInProgress
	}
	return false
}

// answer is what the activity returns for the envelope env of its attempt.
func answer(ctx context.Context, env envelope.Envelope, attempt int32) (envelope.Envelope, error) {
	if !notDone(env) {
		return env, nil
	}
	if env.Error.Code == envelope.CodeCancelled && temporal.IsCanceledError(context.Cause(ctx)) {
		// Temporal cancelled the activity before the tool ran: say so, as
		// the SDK expects of a cancelled activity.
		return envelope.Envelope{}, temporal.NewCanceledError(env, attempt)
	}
	return envelope.Envelope{}, temporal.NewApplicationErrorWithOptions(
		fmt.Sprintf("%s did nothing in attempt %d (%s: %s); Temporal retries it under the same key", env.Tool, attempt, env.Error.Code, env.Error.Message),
		ErrorTypeNotDone, temporal.ApplicationErrorOptions{
			Details:        []any{env, attempt},
			NextRetryDelay: time.Duration(env.RetryAfter) * time.Second,
		})
}

// settle turns an activity's error into the envelope the workflow gets,
// or an error if nothing was started or the activity refused to run.
func (f *Future) settle(err error) (envelope.Envelope, error) {
	var act *temporal.ActivityError
	if !errors.As(err, &act) {
		var cancelled *temporal.CanceledError
		if errors.As(err, &cancelled) {
			// The workflow's context was cancelled: the activity may have
			// been started and may still act.
			return f.unknown("", 0, fmt.Sprintf("the workflow stopped waiting for the tool's activity (%v); it may have acted", err)), nil
		}
		// The SDK refused to schedule it: nothing was started.
		return envelope.Envelope{}, fmt.Errorf("temporaltool: the activity of tool %s was not started: %w", f.tool, err)
	}
	var env envelope.Envelope
	var attempt int32
	read := false
	switch cause := act.Unwrap().(type) {
	case *temporal.ApplicationError:
		switch cause.Type() {
		case ErrorTypeConfig:
			why := strings.TrimPrefix(cause.Message(), ErrConfig.Error()+": ")
			switch {
			case cause.Details(&attempt) != nil:
				// A worker of a build from before refusals said their attempt:
				// an earlier attempt may have run, and acted.
				return f.unknown("", 0, fmt.Sprintf("an attempt of the tool's activity refused to run (%s); which attempt, its worker did not say, and an earlier one may have acted", why)), nil
			case attempt > 1:
				// An earlier attempt ran, and may have acted.
				return f.unknown("", 0, fmt.Sprintf("attempt %d of the tool's activity refused to run (%s), but an earlier attempt may have acted", attempt, why)), nil
			}
			return envelope.Envelope{}, fmt.Errorf("%w: %s", ErrConfig, why)
		case ErrorTypeNotDone:
			read = cause.Details(&env, &attempt) == nil
		}
	case *temporal.CanceledError:
		read = cause.HasDetails() && cause.Details(&env, &attempt) == nil
	}
	if !read || env.Validate() != nil || !notDone(env) {
		// A timeout, a panic, a lost worker, cancelled while it ran: the
		// tool may have acted.
		return f.unknown("", 0, fmt.Sprintf("the tool's activity ended without an answer (%v); it may have acted", err)), nil
	}
	if attempt == 1 || env.Status == envelope.UnknownOutcome {
		// The only attempt did nothing (its envelope says so, and what an
		// earlier call of the action may have done); or the action runs
		// elsewhere (in_progress), which is already an unknown outcome.
		return env, nil
	}
	return f.unknown(env.RequestRef, env.Attempts, fmt.Sprintf(
		"Temporal's retries of the tool's activity ended; the last, attempt %d, did nothing (%s: %s), but an earlier attempt may have acted "+
			"(a worker Temporal gave up on may still run it)", attempt, env.Error.Code, env.Error.Message)), nil
}

// unknown is the envelope of an activity that ended without saying what
// became of its action: ref is the action's reference, if known.
func (f *Future) unknown(ref string, attempts int, why string) envelope.Envelope {
	env := envelope.Envelope{Version: envelope.Version, Status: envelope.UnknownOutcome, Tool: f.tool, RequestRef: ref, Attempts: attempts,
		Error: &envelope.Error{Code: envelope.CodeOutcomeUnknown, Message: why}}
	if f.mode == ByStep {
		env.Next = envelope.AskHuman
		env.Note = "This may already have happened. Do not run it again as a new step; ask a person to check it"
		if ref != "" {
			env.Note += " (reference " + ref + ")"
		}
		env.Note += ", or call the same step again (Call.Step) to learn what became of it."
		return env
	}
	env.Next = envelope.Wait
	env.Note = fmt.Sprintf("This may already have happened. Calling %s again later with the same input is safe: "+
		"it meets the same action and answers what became of it; it will not run twice.", f.tool)
	return env
}
