package agenttool

import (
	"time"

	"github.com/retrysafe/retrysafe/envelope"
)

// Hooks observe guarded calls without a logging or metrics dependency. Each
// hook is optional and is called synchronously on the calling goroutine, so it
// must be quick; it may be called from many goroutines at once.
type Hooks struct {
	// Attempt is called after each attempt of the tool.
	Attempt func(AttemptEvent)
	// Outcome is called once per call with the envelope it returns.
	Outcome func(OutcomeEvent)
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
