package agenttool

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
)

// Every answer a model can get from a guarded tool is built here, from a
// reason and the facts it needs. The golden test (answers_test.go,
// testdata/answers.golden) prints each one, so that a change of wording is
// a reviewed diff.

// reason is why a call answers as it does.
type reason uint8

const (
	reasonMissingScope        reason = iota + 1 // the application set no scope
	reasonInvalidInput                          // the input was refused (a.input)
	reasonCancelled                             // the caller's context ended before anything ran
	reasonStoreUnavailable                      // the store could not be used: nothing ran
	reasonOtherPrincipal                        // the key is another principal's
	reasonOtherTool                             // the key is another tool's
	reasonOtherInput                            // the key was used with other input (a.other)
	reasonReplay                                // a recorded outcome (a.replay), answered again
	reasonReplayUnreadable                      // a recorded outcome that cannot be read (a.state)
	reasonReplaced                              // this action was replaced by another (a.other)
	reasonUnknownAwaits                         // the action's outcome is unknown and awaits reconciliation
	reasonStoreWentBack                         // the store went back in time (a failover) and may have lost the action's record
	reasonSentOtherwise                         // the action is unknown and was sent otherwise than the tool sends it (a.other)
	reasonApprovalPending                       // the same, and the approver has not allowed anything (a.why)
	reasonInProgress                            // another call runs this action
	reasonEarlierRunning                        // another action of the tool in the scope runs (a.other)
	reasonEarlierUnknown                        // another action of the scope is unknown (a.other, a.why)
	reasonEarlierApplied                        // another action of the scope was just found done (a.other)
	reasonEarlierDone                           // another action was just done in place of one found not applied (a.other)
	reasonSucceeded                             // the tool ran and succeeded (a.result)
	reasonDestinationReplayed                   // the destination replayed another caller's request (a.result)
	reasonReconciled                            // the destination confirmed it was done (a.result)
	reasonSettledApplied                        // a person or a sweeper found it done (a.result)
	reasonRefused                               // the tool refused definitely (a.err, a.code)
	reasonAwaitsInput                           // the destination asks for input before it acts: not applied (a.err, a.code)
	reasonUnknown                               // the outcome is unknown (a.err)
	reasonUnavailable                           // every attempt failed transiently: not applied (a.err)
	reasonLeaseLost                             // the lease could not be kept: nothing ran (a.err)
	reasonKeyForgotten                          // keyed, unknown, older than the destination keeps keys (a.created)
	reasonCompensated                           // the compensating action undid it
	reasonCompensationFailed                    // the compensating action failed (a.err says so)
	reasonCount                                 // the number of reasons, plus one
)

// answer is a reason and what its envelope says.
type answer struct {
	reason   reason
	attempts int
	err      error           // the cause, where the reason has one
	input    *envelope.Error // reasonInvalidInput: what is wrong with the input
	code     string          // reasonRefused: the error code
	why      string          // reasonEarlierUnknown, reasonApprovalPending: why it waits
	// resends is set, for reasonEarlierUnknown, when the earlier action's
	// own resend settles it: a keyed tool whose call with that action's
	// exact input meets its reference (the same session and definition),
	// which the destination still keeps.
	resends bool
	other   *Record         // the other action the answer is about, as last read
	result  json.RawMessage // the action's (or the other action's) result
	replay  envelope.Envelope
	state   State     // reasonReplayUnreadable: the record's state
	created time.Time // reasonKeyForgotten: when the action was first claimed
	now     time.Time // when a.other was read; zero counts a pending other as running
	// checkAt, for reasonInProgress and reasonEarlierRunning, is when the
	// hold of a holder that stopped renewing it ends: calling again can
	// change the answer then, not before. Zero if the holder is live. For
	// reasonApprovalPending, when the approval given takes effect (the
	// last attempt can no longer land); zero if none waits.
	checkAt  time.Time
	replayed bool // the answer is a recorded outcome, not this call's doing
	// kept, for reasonEarlierApplied and reasonEarlierDone, is set when
	// the store keeps the answer under the call's key (Record.HeldBack):
	// the same input is answered so for the key's lifetime.
	kept bool
}

// heldBackNote ends the note of an earlier_action_applied answer that the
// store keeps under the call's key (answer.kept): it may be the action
// done, reworded, so the same input never runs it — in the conversation:
// a key is the session's, whatever the fence covers.
func heldBackNote(a answer) string {
	if !a.kept {
		return ""
	}
	return " The same input will not run again in this conversation: if the user wants this done as well, that is a new request."
}

// NoteNotThisCall is the note of a definite failure of a call that never
// reached the store's record (store_unavailable, cancelled, or a front's
// own refusal before any tool ran): it did nothing, but the action it
// repeats may have been done by an earlier call, so the model must not
// tell the user it failed. A front that refuses a call of a guarded tool
// without asking the store begins its note with it.
const NoteNotThisCall = "Nothing was done by this call. An earlier call of the same action, if there was one, may have done it: do not tell the user it failed."

// answerFor builds the envelope of a call of t for ref.
func (t *Tool) answerFor(ref string, a answer) envelope.Envelope {
	name, fence := t.name, t.cfg.Fence
	env := envelope.Envelope{Version: envelope.Version, Tool: name, RequestRef: ref, Attempts: a.attempts, Replayed: a.replayed}
	const notThisCall = NoteNotThisCall
	fail := func(code, msg string, next envelope.Next, note string) {
		env.Status, env.Next, env.Note = envelope.DefiniteFailure, next, note
		env.Error = &envelope.Error{Code: code, Message: msg}
	}
	unknown := func(code, msg string) {
		env.Status = envelope.UnknownOutcome
		env.Error = &envelope.Error{Code: code, Message: msg}
		switch t.cfg.Class {
		case Keyed:
			env.Next = envelope.Wait
			env.Note = fmt.Sprintf("This may already have happened. Calling %s again later with the same input is safe: reference %s makes the destination do it at most once.", name, ref)
		case AtMostOnce:
			env.Next = envelope.AskHuman
			env.Note = fmt.Sprintf("This may already have happened and cannot be checked automatically. Do not call %s again for it; ask a person to confirm reference %s.", name, ref)
		default:
			env.Next = envelope.DoNotRetry
			env.Note = fmt.Sprintf("This may already have happened. Do not call %s again for it; reference %s is being verified. Tell the user it is pending.", name, ref)
		}
	}
	succeed := func(result json.RawMessage, note string) {
		env.Status, env.Next, env.Result, env.Note = envelope.Success, envelope.Continue, result, note
	}
	other := ""
	if a.other != nil {
		other = a.other.Key
	}
	where := "in this conversation"
	if fence == FencePrincipal {
		where = "for this user"
	}
	switch a.reason {
	case reasonMissingScope:
		fail(envelope.CodeMissingScope, "the application set no principal and session for this call (agenttool.WithScope); nothing was run",
			envelope.DoNotRetry, "This tool is not available in this context; tell the user it could not be used.")
	case reasonInvalidInput:
		env.Status, env.Next, env.Error = envelope.DefiniteFailure, envelope.FixInput, a.input
	case reasonCancelled:
		fail(envelope.CodeCancelled, fmt.Sprintf("the call was cancelled before the tool ran: %v", a.err), envelope.Wait, notThisCall+" Call again to find out.")
	case reasonStoreUnavailable:
		fail(envelope.CodeStoreUnavailable, fmt.Sprintf("the idempotency store could not be used, so the tool was not run: %v", a.err),
			envelope.Wait, notThisCall+" Try again later to find out.")
	case reasonOtherPrincipal:
		fail(envelope.CodeScopeMismatch, "this request reference belongs to another principal; nothing was run", envelope.DoNotRetry, "")
	case reasonOtherTool:
		fail(envelope.CodeScopeMismatch, fmt.Sprintf("this request reference belongs to another tool than %s; nothing was run", name), envelope.DoNotRetry, "")
	case reasonOtherInput:
		env.Earlier = earlierOf(*a.other, a.now)
		fail(envelope.CodeKeyReused, "this action was already requested with different input; nothing was run and the first request is unchanged",
			envelope.AskHuman, fmt.Sprintf("The details differ from an earlier request for the same action, which %s; confirm with the user before changing it.",
				earlierPhrase(env.Earlier.State)))
	case reasonReplay:
		env = a.replay
		env.Version = envelope.Version // a stored version 1 is a valid version 2
		env.Replayed = true
		if env.Note == "" && env.Status == envelope.Success {
			env.Note = "Already done by an earlier call; this is its recorded result. Nothing was repeated."
		}
		return env
	case reasonReplayUnreadable:
		env.Replayed = true
		if a.state == Succeeded {
			env.Attempts = max(a.attempts, 1)
			succeed(nil, "Already done by an earlier call, which was recorded; its result cannot be read back. Nothing was repeated.")
			return env
		}
		env.Replayed = false
		fail(envelope.CodeStoreUnavailable, fmt.Sprintf("an earlier call for this action was recorded as not applied, but its outcome cannot be read: %v", a.err),
			envelope.AskHuman, "This action was not done by the earlier call; its details cannot be read. Ask the user before trying again.")
	case reasonReplaced:
		env.Earlier = earlierOf(*a.other, a.now)
		if env.Earlier.State == envelope.ActionSucceeded {
			env.Earlier.Result = validJSON(a.result)
		}
		note := fmt.Sprintf("This was not sent itself: another %s (reference %s) went on in its place %s, and %s. Nothing new was done. "+
			"Tell the user it is pending, and ask before calling %s for it again.", name, other, where, earlierPhrase(env.Earlier.State), name)
		if env.Earlier.State == envelope.ActionSucceeded {
			note = fmt.Sprintf("This was not sent itself: when it was found not done, another %s went on in its place %s (reference %s), and was done. "+
				"Nothing new was done. Tell the user. The same input will not send it again %s: if the user wants it sent, that is a new request.", name, where, other, where)
		}
		fail(envelope.CodeReplaced, fmt.Sprintf("this action's outcome was unknown; it was found not done, and another %s (%s) went on in its place; this call was not run", name, other),
			envelope.AskHuman, note)
	case reasonUnknownAwaits:
		unknown(envelope.CodeOutcomeUnknown, "an earlier attempt of this action has an unknown outcome and awaits reconciliation")
	case reasonStoreWentBack:
		unknown(envelope.CodeOutcomeUnknown, fmt.Sprintf("%v, so this call did not run it", errStoreWentBack))
		env.Next, env.Note = envelope.AskHuman, fmt.Sprintf("The service that remembers actions failed over a short while ago and may have lost its record of this one: "+
			"it may already have been done. Do not call %s again for it; ask a person to confirm reference %s.", name, ref)
	case reasonSentOtherwise:
		unknown(envelope.CodeOutcomeUnknown, fmt.Sprintf("an earlier attempt of this action has an unknown outcome, and was sent under another definition of %s (%s) than this call's (%s: %s), "+
			"which handed the destination the reference another way: it is neither resent nor checked this way, and a person must settle it",
			name, definitionName(a.other.Definition), definitionName(t.cfg.definition), t.cfg.definitionText))
		env.Next, env.Note = envelope.AskHuman, fmt.Sprintf("This may already have happened, and it was sent another way than %s sends it here, so it cannot be retried or checked automatically. "+
			"Do not call %s again for it; ask a person to confirm reference %s.", name, name, ref)
	case reasonApprovalPending:
		unknown(envelope.CodeOutcomeUnknown, a.why)
		if secs := retryAfter(a); secs > 0 {
			// Approved, and the approval waits until the last attempt can
			// no longer land: calling again then takes it.
			env.Next, env.RetryAfter = envelope.Wait, secs
			env.Note = fmt.Sprintf("This may already have happened. A person's decision about it takes effect in about %d seconds, "+
				"once the earlier attempt can no longer arrive. Call %s again with the same input after that; it will not run twice.", secs, name)
		}
	case reasonInProgress:
		env.Status, env.Next = envelope.UnknownOutcome, envelope.Wait
		env.Error = &envelope.Error{Code: envelope.CodeInProgress, Message: "another call for this action is still running"}
		env.Earlier = &envelope.Earlier{RequestRef: ref, State: envelope.ActionRunning}
		env.Note = "The same action is already in progress. Wait, then call again with the same input to get its outcome; it will not run twice."
		if secs := retryAfter(a); secs > 0 {
			env.RetryAfter = secs
			env.Note = fmt.Sprintf("The same action is held by a call that has stopped answering; nothing can change for about %d seconds. "+
				"Call again with the same input after that to get its outcome; it will not run twice.", secs)
		}
	case reasonEarlierRunning:
		env.Status, env.Next = envelope.UnknownOutcome, envelope.Wait
		env.Error = &envelope.Error{Code: envelope.CodeInProgress, Message: fmt.Sprintf(
			"another %s of this %s (%s) is still running, and this tool does one at a time; this call was not run", name, fence, other)}
		env.Earlier = &envelope.Earlier{RequestRef: other, State: envelope.ActionRunning}
		env.Note = fmt.Sprintf("Another %s %s (reference %s) is still in progress; nothing new was done. "+
			"Wait for it, then call again if this one is still needed.", name, where, other)
		if secs := retryAfter(a); secs > 0 {
			env.RetryAfter = secs
			env.Note = fmt.Sprintf("Another %s %s (reference %s) is held by a call that has stopped answering; nothing new was done, and nothing can change "+
				"for about %d seconds: call again after that if this one is still needed.", name, where, other, secs)
		}
	case reasonEarlierUnknown:
		next := envelope.DoNotRetry
		if t.cfg.Class == AtMostOnce {
			next = envelope.AskHuman
		}
		env.Status, env.Next = envelope.UnknownOutcome, next
		env.Error = &envelope.Error{Code: envelope.CodeEarlierUnknown,
			Message: fmt.Sprintf("an earlier %s of this %s (%s) has an unknown outcome (%s); this call was not run", name, fence, other, a.why)}
		env.Earlier = &envelope.Earlier{RequestRef: other, State: envelope.ActionUnknown}
		env.Note = fmt.Sprintf("An earlier %s %s may already have happened and is still being verified (reference %s); nothing new was done. "+
			"Tell the user it is pending, and do not call %s again until it is settled.", name, where, other, name)
		switch {
		case a.resends && t.cfg.Class == Keyed:
			// Resending the earlier action settles it by itself: its
			// reference makes the destination do it at most once.
			env.Next = envelope.Wait
			env.Note = fmt.Sprintf("An earlier %s %s may already have happened (reference %s); nothing new was done. "+
				"Calling %s again with that earlier request's exact input settles it safely: its reference makes the destination do it at most once. "+
				"Do not send this one until it is settled.", name, where, other, name)
		case t.cfg.Reconciler == nil, t.cfg.sentOtherwise(a.other):
			env.Note = fmt.Sprintf("An earlier %s %s may already have happened and cannot be checked automatically (reference %s); nothing new was done. "+
				"Tell the user it is pending: a person must settle it before %s can run again.", name, where, other, name)
		}
	case reasonEarlierApplied:
		if other == "" {
			// A mark made by an earlier version, whose action no record
			// kept names any more.
			fail(envelope.CodeEarlierApplied, fmt.Sprintf("an earlier %s of this %s, whose outcome was unknown, was confirmed done (its record is no longer kept); this call was not run", name, fence),
				envelope.AskHuman, fmt.Sprintf("An earlier %s %s was confirmed done; nothing new was done. Tell the user, and ask before doing it again.", name, where))
			break
		}
		env.Earlier = &envelope.Earlier{RequestRef: other, State: envelope.ActionSucceeded, Result: validJSON(a.result)}
		fail(envelope.CodeEarlierApplied, fmt.Sprintf("an earlier %s of this %s (%s), whose outcome was unknown, was confirmed done; this call was not run", name, fence, other),
			envelope.AskHuman, fmt.Sprintf("An earlier %s %s was confirmed done (reference %s); nothing new was done. "+
				"Tell the user, and ask before doing it again.", name, where, other)+heldBackNote(a))
	case reasonEarlierDone:
		env.Earlier = &envelope.Earlier{RequestRef: other, State: envelope.ActionSucceeded, Result: validJSON(a.result)}
		fail(envelope.CodeEarlierApplied, fmt.Sprintf("another %s of this %s (%s) was just done, in place of an earlier one whose outcome was unknown; this call was not run",
			name, fence, other), envelope.AskHuman, fmt.Sprintf("Another %s %s was just done (reference %s); nothing new was done. "+
			"Tell the user, and ask before doing it again.", name, where, other)+heldBackNote(a))
	case reasonSucceeded:
		succeed(a.result, "")
	case reasonDestinationReplayed:
		succeed(a.result, "The destination had already done this for an earlier request; this is its result. Nothing was repeated.")
		env.Replayed = true
	case reasonReconciled:
		succeed(a.result, "The destination confirmed this was done; it was not repeated.")
		env.Reconciled = true
	case reasonSettledApplied:
		succeed(a.result, "Confirmed done after an unknown outcome; it was not repeated.")
		env.Reconciled = true
	case reasonRefused:
		env.Status, env.Next = envelope.DefiniteFailure, envelope.DoNotRetry
		env.Error = &envelope.Error{Code: a.code, Message: a.err.Error()}
	case reasonAwaitsInput:
		fail(a.code, a.err.Error(), envelope.AskHuman, fmt.Sprintf("Nothing was done: %s needs an answer from the user before it acts. "+
			"Tell the user what it asks; the same call can be made again once they can answer it.", name))
	case reasonUnknown:
		unknown(envelope.CodeOutcomeUnknown, fmt.Sprintf("the outcome is unknown: %v", a.err))
	case reasonUnavailable:
		fail(envelope.CodeUnavailable, fmt.Sprintf("not applied; the destination is unavailable: %v", a.err),
			envelope.Wait, "Nothing was done. The same call can be tried again later.")
	case reasonLeaseLost:
		fail(envelope.CodeStoreUnavailable, fmt.Sprintf("the key's lease could not be kept in the store, so nothing more was run: %v", a.err),
			envelope.Wait, "Nothing was done. Try again later.")
	case reasonKeyForgotten:
		env.Status, env.Next = envelope.UnknownOutcome, envelope.AskHuman
		env.Error = &envelope.Error{Code: envelope.CodeOutcomeUnknown, Message: fmt.Sprintf(
			"%v (first sent %s, longer ago than the destination keeps keys, %v); it is not retried blindly", errKeyForgotten,
			a.created.UTC().Format(time.RFC3339), t.cfg.DestinationKeyTTL)}
		env.Note = fmt.Sprintf("This may already have happened, and it is too old to retry safely. Do not call %s again for it; ask a person to check reference %s.", name, ref)
	case reasonCompensated:
		fail(envelope.CodeCompensated, "the action's effect, if it happened, was undone by its compensating action",
			envelope.AskHuman, "This action was cancelled and undone. Ask the user whether to do it again.")
	case reasonCompensationFailed:
		env.Status, env.Next = envelope.UnknownOutcome, envelope.AskHuman
		env.Error = &envelope.Error{Code: envelope.CodeOutcomeUnknown, Message: a.err.Error()}
		env.Note = "This may already have happened and could not be undone. Ask a person to check reference " + ref + "."
	default:
		panic(fmt.Sprintf("agenttool: no answer for reason %d", a.reason))
	}
	switch a.reason {
	case reasonEarlierRunning, reasonEarlierUnknown, reasonEarlierApplied, reasonEarlierDone:
		if a.other != nil && t.cfg.otherDefinition(a.other) {
			env.Error.Message += fmt.Sprintf("; that action was made under another definition of %s (%s) than this call's (%s: %s): "+
				"replicas or versions that build %s differently give one request two references", name,
				definitionName(a.other.Definition), definitionName(t.cfg.definition), t.cfg.definitionText, name)
		}
	}
	return env
}

// retryAfter is a.checkAt in whole seconds from a.now, at least 1; 0 if
// there is none.
func retryAfter(a answer) int {
	if a.checkAt.IsZero() || a.now.IsZero() {
		return 0
	}
	d := a.checkAt.Sub(a.now)
	return max(int((d+time.Second-1)/time.Second), 1)
}

// earlierOf says what became of the action of rec, for an answer about it;
// a zero now counts a pending record as running.
func earlierOf(rec Record, now time.Time) *envelope.Earlier {
	e := &envelope.Earlier{RequestRef: rec.Key, State: envelope.ActionUnknown}
	switch {
	case rec.State == Succeeded:
		e.State = envelope.ActionSucceeded
	case rec.State == Failed, rec.State == Unknown && rec.RetryApproved:
		e.State = envelope.ActionFailed
	case rec.State == Pending && (now.IsZero() || now.Before(rec.LeaseExpiry)):
		e.State = envelope.ActionRunning
	}
	return e
}

// earlierPhrase says an action's state in words for a note.
func earlierPhrase(s envelope.ActionState) string {
	switch s {
	case envelope.ActionSucceeded:
		return "was done"
	case envelope.ActionFailed:
		return "was not done"
	case envelope.ActionRunning:
		return "is still running"
	}
	return "may or may not have happened and is being verified"
}

func validJSON(b json.RawMessage) json.RawMessage {
	if len(b) > 0 && !json.Valid(b) {
		return nil
	}
	return b
}
