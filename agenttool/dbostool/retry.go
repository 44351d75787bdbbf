package dbostool

import (
	"fmt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// retryable reports whether another attempt under the same key can
// change env, which is what DBOS's step retries are for when they own the
// retries: nothing was applied (unavailable), or the tool is Keyed and its
// destination does the action at most once per reference (outcome_unknown
// with next wait: the retry the tool's RetryPolicy would have made). An
// answer about the call alone (store_unavailable, in_progress) is asked
// again inside the step (Step.invoke), whoever owns the retries. Every
// other envelope is the step's outcome; an unknown outcome of a
// Reconcilable or AtMostOnce tool above all, which a retry would only
// meet again.
func retryable(env envelope.Envelope, class agenttool.Class) bool {
	if env.Error == nil || env.Next != envelope.Wait {
		return false
	}
	switch env.Error.Code {
	case envelope.CodeUnavailable:
		return true
	case envelope.CodeOutcomeUnknown:
		return class == agenttool.Keyed
	}
	return false
}

// checkRetries refuses retries with two owners.
func checkRetries(name string, set agenttool.Settings, o Options) error {
	if o.StepRetries > 0 && set.Retry.MaxAttempts > 1 {
		return fmt.Errorf("dbostool: tool %q: DBOS would run the step up to %d times (StepRetries %d) and the tool makes up to %d attempts in each (its Retry.MaxAttempts), "+
			"up to %d attempts of one action under two backoffs; choose one owner: build the tool with Retry.MaxAttempts 1 to let DBOS retry, "+
			"or leave StepRetries 0 to let the tool retry: %w: %w", name, o.StepRetries+1, o.StepRetries, set.Retry.MaxAttempts, (o.StepRetries+1)*set.Retry.MaxAttempts,
			ErrRetriesMultiply, ErrInvalidOptions)
	}
	return nil
}
