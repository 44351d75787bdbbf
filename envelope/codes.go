package envelope

// Error codes written by retrysafe. A tool's own definite errors may carry
// other codes (see [MarkDefinite]); these are the ones the wrapper itself uses.
const (
	// CodeInvalidInput: the model's input is not acceptable (malformed JSON,
	// wrong fields). Nothing ran. Next: fix_input.
	CodeInvalidInput = "invalid_input"
	// CodeModelSuppliedKey: the input carried its own idempotency key or
	// request id; keys come from trusted code only. Nothing ran.
	CodeModelSuppliedKey = "model_supplied_key"
	// CodeMissingScope: no principal and session were set by the application
	// for this call. Nothing ran.
	CodeMissingScope = "missing_scope"
	// CodeKeyReused: the action's key was used before with different input.
	// Nothing ran; the first record is untouched.
	CodeKeyReused = "key_reused_with_different_input"
	// CodeStoreUnavailable: the key could not be claimed or read, so the tool
	// was not run (fail closed). An earlier call of the same action may
	// have done it; the envelope's note says so. (A claim that fails while
	// the key's record can still be read is answered with what the record
	// says, where that needs no write: a replayed outcome, in_progress.)
	CodeStoreUnavailable = "store_unavailable"
	// CodeCancelled: the caller's context ended before the tool ran. As
	// with CodeStoreUnavailable, an earlier call may have done the action.
	CodeCancelled = "cancelled"
	// CodeRejected: the tool reported a definite failure without a code of
	// its own.
	CodeRejected = "rejected"
	// CodeUnavailable: every attempt failed with a transient error; the effect
	// was not applied.
	CodeUnavailable = "unavailable"
	// CodeInProgress: another call for the same action is still running;
	// or, with Earlier naming it, another action of the tool in the same
	// scope is (one write at a time per tool and scope).
	CodeInProgress = "in_progress"
	// CodeOutcomeUnknown: the effect may have been applied; the record awaits
	// reconciliation.
	CodeOutcomeUnknown = "outcome_unknown"
)

// CodeScopeMismatch: the request reference belongs to another principal, or
// another tool. Nothing ran and nothing of the other record is revealed.
const CodeScopeMismatch = "scope_mismatch"

// CodeCompensated: the action's effect, if it happened, was undone by its
// compensating action after an unknown outcome.
const CodeCompensated = "compensated"

// Codes of the unknown fence: a call of a tool in a scope where an earlier
// action of the same tool had an unknown outcome. The call did not run; its
// envelope's Earlier field names the earlier action and says what became of
// it.
const (
	// CodeEarlierUnknown: an earlier action of this tool in this scope still
	// has an unknown outcome, so nothing new was run (status
	// unknown_outcome: the earlier action happened at most once).
	CodeEarlierUnknown = "earlier_action_unknown"
	// CodeEarlierApplied: an earlier action of this tool in this scope, whose
	// outcome was unknown, was just found applied; this call was not run
	// (status definite_failure), so that the user hears of the earlier
	// action before anything else is sent. Earlier names that action,
	// unless no record kept names it any more. The call's own input, sent
	// again, is answered the same (Replayed) for its key's lifetime: it
	// may be that action reworded.
	CodeEarlierApplied = "earlier_action_applied"
	// CodeReplaced: this action's outcome was unknown, it was found not
	// applied, and another action of this tool in this scope went on in its
	// place (Earlier names it): this one was not done and will not be
	// (status definite_failure).
	CodeReplaced = "replaced"
)
