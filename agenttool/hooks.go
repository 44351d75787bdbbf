package agenttool

import (
	"time"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// Hooks observe guarded calls without a logging or metrics dependency. Each
// hook is optional and is called synchronously on the calling goroutine, so it
// must be quick; it may be called from many goroutines at once.
type Hooks struct {
	// Attempt is called after each attempt of the tool.
	Attempt func(AttemptEvent)
	// Outcome is called once per call with the envelope it returns.
	Outcome func(OutcomeEvent)
	// Reconcile is called after each check of a destination, by a call, the
	// sweeper or an operator.
	Reconcile func(ReconcileEvent)
}

// ReconcileEvent describes one check of a request reference.
type ReconcileEvent struct {
	Tool       string
	RequestRef string
	Verdict    reconcile.Verdict
	Err        error  // why the check could not say, if it could not
	By         string // "reconciler" for a call, "sweeper" or "operator:NAME"
}

// AttemptEvent describes one attempt.
type AttemptEvent struct {
	Tool       string
	RequestRef string
	Attempt    int
	Err        error          // nil on success
	Class      envelope.Class // Err's class; meaningless when Err is nil
	Duration   time.Duration
}

// OutcomeEvent describes the end of one call.
type OutcomeEvent struct {
	Envelope envelope.Envelope
	Duration time.Duration
}
