package dbostool

import (
	"fmt"
	"math"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// DBOS's own defaults for a step's backoff (dbos.WithStepBaseInterval,
// WithStepMaxInterval, WithStepBackoffFactor), and the low end of the
// jitter it applies to each wait.
const (
	dbosBaseInterval = 100 * time.Millisecond
	dbosMaxInterval  = 5 * time.Second
	dbosFactor       = 2.0
	dbosJitterLow    = 0.95
)

// retryable reports whether calling again under the same key can change
// env, which is what DBOS's step retries are for when they own the
// retries: the call did nothing and says to wait (store_unavailable,
// in_progress), nothing was applied (unavailable), or the tool is Keyed
// and its destination does the action at most once per reference
// (outcome_unknown with next wait: the retry the tool's RetryPolicy would
// have made). Every other envelope is the step's outcome; an unknown
// outcome of a Reconcilable or AtMostOnce tool above all, which a retry
// would only meet again.
func retryable(env envelope.Envelope, class agenttool.Class) bool {
	if env.Error == nil || env.Next != envelope.Wait {
		return false
	}
	switch env.Error.Code {
	case envelope.CodeStoreUnavailable, envelope.CodeUnavailable, envelope.CodeInProgress:
		return true
	case envelope.CodeOutcomeUnknown:
		return class == agenttool.Keyed
	}
	return false
}

// backoff is DBOS's backoff of a step, defaults applied as DBOS applies
// them.
type backoff struct {
	retries   int
	base, max time.Duration
	factor    float64
}

func newBackoff(o Options) backoff {
	b := backoff{retries: o.StepRetries, base: o.StepBaseInterval, max: o.StepMaxInterval, factor: o.StepBackoffFactor}
	if b.base == 0 {
		b.base = dbosBaseInterval
	}
	if b.factor == 0 {
		b.factor = dbosFactor
	}
	if b.max == 0 {
		// DBOS raises its default ceiling to a larger base interval.
		b.max = max(dbosMaxInterval, b.base)
	}
	return b
}

// window returns at least how long DBOS waits between the step's runs, in
// all, before its retries run out; it stops counting at enough.
func (b backoff) window(enough time.Duration) time.Duration {
	var sum float64
	for n := 1; n <= b.retries && sum < float64(enough); n++ {
		d := math.Min(float64(b.base)*math.Pow(b.factor, float64(n-1)), float64(b.max)) * dbosJitterLow
		if b.factor == 1 || d >= float64(b.max)*dbosJitterLow {
			// Every later wait is the same: count them at once.
			sum += d * float64(b.retries-n+1)
			break
		}
		sum += d
	}
	return time.Duration(math.Min(sum, float64(enough)))
}

// checkRetries refuses retries with two owners, and a step that could not
// outwait, after a crash, the lease of the process that died holding its
// action.
func checkRetries(name string, set agenttool.Settings, o Options) error {
	bad := func(sentinel error, format string, args ...any) error {
		return fmt.Errorf("dbostool: tool %q: %s: %w: %w", name, fmt.Sprintf(format, args...), sentinel, ErrInvalidOptions)
	}
	if o.StepRetries > 0 && set.Retry.MaxAttempts > 1 {
		return bad(ErrRetriesMultiply, "DBOS would run the step up to %d times (StepRetries %d) and the tool makes up to %d attempts in each (its Retry.MaxAttempts), "+
			"up to %d attempts of one action under two backoffs; choose one owner: build the tool with Retry.MaxAttempts 1 to let DBOS retry, "+
			"or leave StepRetries 0 to let the tool retry", o.StepRetries+1, o.StepRetries, set.Retry.MaxAttempts, (o.StepRetries+1)*set.Retry.MaxAttempts)
	}
	if set.Class == agenttool.ReadOnly {
		return nil // nothing is claimed, so nothing is held by the dead
	}
	held := set.Lease + set.ClockSkew
	wait := max(set.WaitTimeout, 0)
	b := newBackoff(o)
	if retried := b.window(held); wait+retried < held {
		if o.StepRetries == 0 {
			return bad(ErrRecoveryWindow, "a step that DBOS runs again after a crash meets the dead process's claim of its action, which holds for up to Lease %v plus ClockSkew %v, "+
				"but waits only %v for it (WaitTimeout), and would record in_progress as the step's outcome; set the tool's WaitTimeout to %v or more, "+
				"or shorten its Lease (Lease 15s with WaitTimeout 20s, say), or let DBOS retry (StepRetries, with a tool of Retry.MaxAttempts 1)",
				set.Lease, set.ClockSkew, wait, held)
		}
		return bad(ErrRecoveryWindow, "a step that DBOS runs again after a crash meets the dead process's claim of its action, which holds for up to Lease %v plus ClockSkew %v, "+
			"but DBOS's %d retries wait about %v in all and the tool %v (WaitTimeout), and the step would record in_progress as its outcome; "+
			"raise StepRetries or StepMaxInterval, or the tool's WaitTimeout, or shorten its Lease", set.Lease, set.ClockSkew, o.StepRetries, retried, wait)
	}
	return nil
}
