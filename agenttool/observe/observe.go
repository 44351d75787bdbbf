// Package observe turns guarded calls' [agenttool.Hooks] into structured
// log records ([Log], with log/slog), combines hooks ([Join]), and names
// the attributes that retrysafe's observability adapters share:
// agenttool/otelhooks puts the same names on spans and metrics.
//
// What is never recorded: the principal, the session, input values, a
// tool's result, and error messages (a tool's error may quote its input).
// An outcome is described by its status, its error code (error.type), the
// guidance given to the model (retrysafe.next) and its counts; the
// envelope itself, and an Operator, have the rest.
package observe

import (
	"context"
	"strings"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// Attribute names. The gen_ai ones follow OpenTelemetry's semantic
// conventions for generative AI (tool execution); error.type is the
// general one. retrysafe's own are under "retrysafe.".
const (
	// OperationName is "execute_tool" for a guarded call.
	OperationName = "gen_ai.operation.name"
	// ToolName is the guarded tool's name.
	ToolName = "gen_ai.tool.name"
	// ErrorType is the envelope's error code, when the call did not
	// succeed (or the cause's class, for an attempt).
	ErrorType = "error.type"

	Status     = "retrysafe.status"      // success, definite_failure, unknown_outcome
	Next       = "retrysafe.next"        // the guidance given to the model
	Class      = "retrysafe.class"       // keyed, reconcilable, at-most-once, read-only
	RequestRef = "retrysafe.request_ref" // spans and logs only: one value per action
	Attempts   = "retrysafe.attempts"    // attempts made for the action
	Replayed   = "retrysafe.replayed"    // answered from a recorded outcome
	Reconciled = "retrysafe.reconciled"  // the destination confirmed it
	Verdict    = "retrysafe.reconcile.verdict"
	By         = "retrysafe.reconcile.by" // reconciler, fence, sweeper, operator:NAME
	Attempt    = "retrysafe.attempt"      // one attempt's number
	Wait       = "retrysafe.retry.wait"   // the wait before a retry
	Earlier    = "retrysafe.earlier.request_ref"
	EarlierIs  = "retrysafe.earlier.state"
	Decision   = "retrysafe.approval.decision"
	Duration   = "retrysafe.duration"
)

// ExecuteTool is the value of OperationName.
const ExecuteTool = "execute_tool"

// VerdictValue names a reconciler's verdict as an attribute value:
// applied, not_applied, pending or cant_say.
func VerdictValue(v reconcile.Verdict) string {
	switch v {
	case reconcile.Applied:
		return "applied"
	case reconcile.NotApplied:
		return "not_applied"
	case reconcile.Pending:
		return "pending"
	}
	return "cant_say"
}

// ClassValue names a side-effect class as an attribute value:
// read_only, keyed, reconcilable or at_most_once.
func ClassValue(c agenttool.Class) string {
	return strings.ReplaceAll(c.String(), "-", "_")
}

// ErrorTypeOf is the error.type of an envelope: its error code, or
// "outcome_unknown" for an unknown outcome without one; "" for a success.
func ErrorTypeOf(env envelope.Envelope) string {
	switch {
	case env.Status == envelope.Success:
		return ""
	case env.Error != nil && env.Error.Code != "":
		return env.Error.Code
	case env.Status == envelope.UnknownOutcome:
		return envelope.CodeOutcomeUnknown
	}
	return "_OTHER"
}

// Join returns hooks that call each of hooks in order. A Start hook's
// context is passed on to the next one's.
func Join(hooks ...agenttool.Hooks) agenttool.Hooks {
	var j agenttool.Hooks
	for _, h := range hooks {
		j.Start = joinStart(j.Start, h.Start)
		j.Claimed = join(j.Claimed, h.Claimed)
		j.Attempt = join(j.Attempt, h.Attempt)
		j.Retry = join(j.Retry, h.Retry)
		j.Replayed = join(j.Replayed, h.Replayed)
		j.Waited = join(j.Waited, h.Waited)
		j.Reconcile = join(j.Reconcile, h.Reconcile)
		j.Fenced = join(j.Fenced, h.Fenced)
		j.Unknown = join(j.Unknown, h.Unknown)
		j.Approval = join(j.Approval, h.Approval)
		j.Outcome = join(j.Outcome, h.Outcome)
	}
	return j
}

func join[E any](a, b func(ctx context.Context, e E)) func(ctx context.Context, e E) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(ctx context.Context, e E) { a(ctx, e); b(ctx, e) }
}

func joinStart(a, b func(context.Context, agenttool.StartEvent) context.Context) func(context.Context, agenttool.StartEvent) context.Context {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(ctx context.Context, e agenttool.StartEvent) context.Context {
		if c := a(ctx, e); c != nil {
			ctx = c
		}
		if c := b(ctx, e); c != nil {
			ctx = c
		}
		return ctx
	}
}
