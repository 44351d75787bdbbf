package observe

import (
	"context"
	"log/slog"
	"strings"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/printable"
	"github.com/retrysafe/retrysafe/reconcile"
)

// text is a string attribute whose value may come from outside (an error
// code a destination chose, a reference read from a store, a name): it
// passes through the filter every human-facing output shares (package
// internal/printable), so that a log read on a terminal shows control
// characters and bidi overrides instead of obeying them.
func text(key, value string) slog.Attr { return slog.String(key, printable.Line(value)) }

// Log returns hooks that write one log record per outcome and per
// noteworthy event to l, with the attribute names of this package:
//
//	outcome            INFO (WARN for unknown_outcome)  "retrysafe: call"
//	fenced             WARN   an earlier action holds the call back
//	retry              INFO   an attempt failed and will be retried
//	reconcile          INFO   a destination was asked (DEBUG when it could not say)
//	approval           INFO   an approver answered (WARN if it failed)
//	waited             DEBUG  (INFO when the call gave up: in_progress)
//	claimed, attempt,
//	replayed, unknown  DEBUG
//
// Records are written with the hook's context, so a handler can add the
// caller's trace. A nil l means slog.Default().
func Log(l *slog.Logger) agenttool.Hooks {
	if l == nil {
		l = slog.Default()
	}
	log := func(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
		if l.Enabled(ctx, level) {
			l.LogAttrs(ctx, level, msg, attrs...)
		}
	}
	return agenttool.Hooks{
		Outcome: func(ctx context.Context, e agenttool.OutcomeEvent) {
			env := e.Envelope
			level := slog.LevelInfo
			if env.Status == envelope.UnknownOutcome {
				level = slog.LevelWarn
			}
			attrs := []slog.Attr{
				slog.String(ToolName, env.Tool), slog.String(Status, string(env.Status)),
				slog.String(Next, string(env.Next)), slog.String(Class, ClassValue(e.Class)),
				text(RequestRef, env.RequestRef), slog.Int(Attempts, env.Attempts),
				slog.Bool(Replayed, env.Replayed), slog.Bool(Reconciled, env.Reconciled),
				slog.Duration(Duration, e.Duration),
			}
			if t := ErrorTypeOf(env); t != "" {
				attrs = append(attrs, text(ErrorType, t))
			}
			log(ctx, level, "retrysafe: call", attrs...)
		},
		Fenced: func(ctx context.Context, e agenttool.FencedEvent) {
			log(ctx, slog.LevelWarn, "retrysafe: held back by an earlier action", slog.String(ToolName, e.Tool),
				text(RequestRef, e.RequestRef), text(Earlier, e.Earlier), slog.String(EarlierIs, string(e.EarlierState)))
		},
		Retry: func(ctx context.Context, e agenttool.RetryEvent) {
			log(ctx, slog.LevelInfo, "retrysafe: retry", slog.String(ToolName, e.Tool), text(RequestRef, e.RequestRef),
				slog.Int(Attempt, e.Attempt), slog.String(ErrorType, envelope.Classify(e.Err).String()), slog.Duration(Wait, e.Wait))
		},
		Reconcile: func(ctx context.Context, e agenttool.ReconcileEvent) {
			level := slog.LevelInfo
			if e.Verdict == reconcile.CantSay {
				level = slog.LevelDebug
			}
			by, _, _ := strings.Cut(e.By, ":") // operator:NAME is logged as operator: names are people's
			log(ctx, level, "retrysafe: reconcile", slog.String(ToolName, e.Tool), text(RequestRef, e.RequestRef),
				slog.String(Verdict, VerdictValue(e.Verdict)), text(By, by))
		},
		Approval: func(ctx context.Context, e agenttool.ApprovalEvent) {
			level, decision := slog.LevelInfo, e.Decision.String()
			if e.Err != nil {
				level, decision = slog.LevelWarn, "failed"
			}
			log(ctx, level, "retrysafe: approval", slog.String(ToolName, e.Tool), text(RequestRef, e.RequestRef),
				slog.Int(Attempts, e.Attempts), slog.String(Decision, decision))
		},
		Waited: func(ctx context.Context, e agenttool.WaitedEvent) {
			level := slog.LevelDebug
			if e.GaveUp {
				level = slog.LevelInfo
			}
			log(ctx, level, "retrysafe: waited for another call", slog.String(ToolName, e.Tool), text(RequestRef, e.RequestRef),
				slog.Duration(Duration, e.Duration), slog.Bool("retrysafe.wait.gave_up", e.GaveUp))
		},
		Claimed: func(ctx context.Context, e agenttool.ClaimedEvent) {
			log(ctx, slog.LevelDebug, "retrysafe: claimed", slog.String(ToolName, e.Tool), text(RequestRef, e.RequestRef),
				slog.Bool("retrysafe.took_over", e.TookOver), slog.Int(Attempts, e.Attempts))
		},
		Attempt: func(ctx context.Context, e agenttool.AttemptEvent) {
			attrs := []slog.Attr{slog.String(ToolName, e.Tool), text(RequestRef, e.RequestRef),
				slog.Int(Attempt, e.Attempt), slog.Duration(Duration, e.Duration)}
			if e.Err != nil {
				attrs = append(attrs, slog.String(ErrorType, e.Class.String()))
			}
			log(ctx, slog.LevelDebug, "retrysafe: attempt", attrs...)
		},
		Replayed: func(ctx context.Context, e agenttool.ReplayedEvent) {
			log(ctx, slog.LevelDebug, "retrysafe: replayed", slog.String(ToolName, e.Tool), text(RequestRef, e.RequestRef),
				slog.String("retrysafe.state", e.State.String()))
		},
		Unknown: func(ctx context.Context, e agenttool.UnknownEvent) {
			log(ctx, slog.LevelDebug, "retrysafe: unknown outcome recorded", slog.String(ToolName, e.Tool),
				text(RequestRef, e.RequestRef), slog.Int(Attempts, e.Attempts))
		},
	}
}
