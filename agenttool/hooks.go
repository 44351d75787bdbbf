package agenttool

import (
	"context"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// Hooks observe guarded calls without a logging or metrics dependency:
// package agenttool/observe turns them into log records, and
// agenttool/otelhooks into OpenTelemetry spans and metrics. Each hook is
// optional and is called synchronously on the calling goroutine with the
// call's context, so it must be quick; it may be called from many
// goroutines at once. An unset hook costs nothing.
//
// The life of a call, in hooks: Start; then Replayed (a recorded outcome),
// or Waited (for another call holding the key) and again, or Claimed;
// after a claim, Reconcile for each check of the destination, Fenced if an
// earlier action holds the call back, Attempt for each attempt, Retry
// before each retry, Approval when an approver is asked, Unknown when an
// unknown outcome is recorded; and Outcome, once, with the envelope.
type Hooks struct {
	// Start is called first. The context it returns, if not nil, is the
	// call's from then on: the tool, its reconciler and every later hook of
	// the call receive it (a tracing adapter starts its span here). It must
	// derive from ctx, which carries the call's scope: a call whose context
	// has none is refused (missing_scope).
	Start func(ctx context.Context, e StartEvent) context.Context
	// Claimed is called when the call claims its key: to run the tool, or
	// to check or retry an action whose outcome is unknown (TookOver).
	Claimed func(ctx context.Context, e ClaimedEvent)
	// Attempt is called after each attempt of the tool.
	Attempt func(ctx context.Context, e AttemptEvent)
	// Retry is called when an attempt will be retried, before the wait.
	Retry func(ctx context.Context, e RetryEvent)
	// Replayed is called when a call answers with a recorded outcome
	// instead of running the tool.
	Replayed func(ctx context.Context, e ReplayedEvent)
	// Waited is called when a call stops waiting for another call that
	// held its key.
	Waited func(ctx context.Context, e WaitedEvent)
	// Reconcile is called after each check of a destination, by a call, the
	// unknown fence, the sweeper or an operator.
	Reconcile func(ctx context.Context, e ReconcileEvent)
	// Fenced is called when the unknown fence holds a call back: an earlier
	// action of the tool in the scope is unknown, or was found applied. A
	// call held back by a notice and asked for again, word for word, is
	// answered from its record: Replayed, not Fenced.
	Fenced func(ctx context.Context, e FencedEvent)
	// Unknown is called when a call records an unknown outcome.
	Unknown func(ctx context.Context, e UnknownEvent)
	// Approval is called when a call has asked the tool's Approver.
	Approval func(ctx context.Context, e ApprovalEvent)
	// Outcome is called once per call with the envelope it returns.
	Outcome func(ctx context.Context, e OutcomeEvent)
}

// StartEvent describes a call that begins.
type StartEvent struct {
	Tool  string
	Class Class
}

// ClaimedEvent describes a claim of a call's key.
type ClaimedEvent struct {
	Tool       string
	RequestRef string
	// TookOver is set when the claim took over an unknown outcome or a
	// lapsed lease: the action may have happened, and is checked or
	// retried.
	TookOver bool
	Attempts int // attempts made before this claim
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

// RetryEvent describes a retry about to be made.
type RetryEvent struct {
	Tool       string
	RequestRef string
	Attempt    int           // the attempt that failed
	Err        error         // why it failed
	Wait       time.Duration // the wait before the next attempt
}

// ReplayedEvent describes a recorded outcome answered again.
type ReplayedEvent struct {
	Tool       string
	RequestRef string
	State      State // Succeeded, Failed or Unknown
}

// WaitedEvent describes a wait for another call holding the key.
type WaitedEvent struct {
	Tool       string
	RequestRef string
	Duration   time.Duration
	// GaveUp is set when the call stopped waiting and answered
	// in_progress (WaitTimeout, or its context ended).
	GaveUp bool
}

// ReconcileEvent describes one check of a request reference.
type ReconcileEvent struct {
	Tool       string
	RequestRef string
	Verdict    reconcile.Verdict
	Err        error  // why the check could not say, if it could not
	By         string // "reconciler" for a call, "fence", "sweeper" or "operator:NAME"
}

// FencedEvent describes a call held back by the unknown fence.
type FencedEvent struct {
	Tool       string
	RequestRef string // the call's
	Earlier    string // the earlier action's reference; empty if no record kept names it any more
	// EarlierState is what became of the earlier action: unknown, or
	// applied (the call is held back so that the user hears of it first).
	EarlierState envelope.ActionState
}

// UnknownEvent describes an unknown outcome a call records.
type UnknownEvent struct {
	Tool       string
	RequestRef string
	Attempts   int
	Reason     string // the envelope's error message
}

// ApprovalEvent describes an approver's answer.
type ApprovalEvent struct {
	Tool       string
	RequestRef string
	Attempts   int      // the outcome asked about
	Decision   Decision // Undecided if the approver has not decided
	By         string
	Err        error // the approver's error, if it failed
}

// OutcomeEvent describes the end of one call.
type OutcomeEvent struct {
	Envelope envelope.Envelope
	Class    Class
	Duration time.Duration
	// Path is the phases the call went through, for logs and failure
	// messages: "claim → attempt → record → done" (see
	// docs/life-of-a-call.md).
	Path string
}
