// Package agenttool makes side-effecting tools safe to retry inside LLM
// agents. It depends on no agent framework: a guarded [Tool] is a
// langchaingo tools.Tool by its method set (agenttool/langchain has the
// langchaingo helpers), and agenttool/mcptool serves and calls guarded tools
// over the Model Context Protocol.
//
// A guarded tool derives an idempotency key for each logical action from
// trusted code — never from the model — claims it in a durable [Store], runs
// the tool with retries only where the key makes them safe, records the
// outcome, and answers with an envelope (package envelope): success,
// definite_failure or unknown_outcome, with guidance the model can follow.
//
// # Basics
//
//	store, _ := boltstore.Open("retrysafe.db", nil)
//	send, err := agenttool.New("send_email", "Send an email.", sendEmail, agenttool.Options{
//		Store: store,
//		Class: agenttool.Keyed, // the mail API honours the request reference as an idempotency key
//	})
//	// trusted application code, not the model, says who acts and where:
//	ctx = agenttool.WithScope(ctx, "tenant-42/user-7", "conversation-9")
//	agent := agents.NewOpenAIFunctionsAgent(langchain.WithToolSchemas(model, send), []tools.Tool{send})
//	executor := agents.NewExecutor(agent)
//
// [Wrap] guards an existing tool that takes text ([Callable], which a
// langchaingo tools.Tool is); [New] builds one from a Go function
// with a JSON input struct and exposes its JSON Schema. Either way, Call
// returns the envelope's JSON and a nil error: langchaingo's executor aborts
// the whole run on a tool error, and the model must see every outcome. Go
// callers use [Tool.Invoke] for the typed envelope.
//
// # Composition
//
// One call is: Envelope(Claim(Retry(AttemptTimeout(tool)))). Retries live
// inside the claim, around one tool call, never around the agent run.
//
// # Keys: what counts as one action
//
// The key of an action is a digest of the key version, the tool's key
// prefix and name, the principal, the session and the loose form of the
// tool's identifying values (all fields by default), or of an explicit
// action id ([WithActionID]) from an orchestrator: SHA-256 (key version
// 2), or HMAC-SHA-256 under [Options].DigestKey (version 3), without which
// a reference can be checked against a guess of who did what. The fingerprint is a
// digest of the exact canonical form of what the tool receives, and is
// compared every time a key is met again: other input under the same key is
// refused with key_reused_with_different_input and the first record is left
// untouched. The printable key is the request reference ("send_email/…"):
// the tool finds it with [RequestRef] and passes it downstream: as the
// Idempotency-Key of a destination that honours one ([Keyed]), otherwise
// where the destination keeps it (a Message-ID, a client reference). An
// HTTP tool sends through agenttool/httpsend, so that nothing below it
// sends a request twice.
//
// Two inputs the tool cannot tell apart are one action:
//
//   - A tool built with [New] reads its input strictly: member names must be
//     exactly its JSON names, null is accepted only for pointer and
//     interface fields, required fields must be present and not empty. Key
//     and fingerprint are computed from the decoded value, re-encoded.
//   - A wrapped tool takes one JSON object ([Options].TextInput for plain
//     text); names that differ only in case are refused, and the tool
//     receives the canonical form that was digested. A wrapped tool that
//     is an [InputChecker] (mcptool's, checking an MCP server's input
//     schema) refuses what it would refuse before any key is claimed.
//   - Identifying values are compared loosely: Unicode NFKC, case folded,
//     invisible format characters dropped, blank-looking letters read as
//     spaces, white space trimmed and collapsed, and lookalike letters
//     read as Latin in a word that mixes them with Latin ones. "ANA  LIMA"
//     and "Аna Lima" (a Cyrillic А) meet the key of "Ana Lima" and are refused as
//     other input (or replayed, if identical): cosmetic variants are
//     refused, not merged, and never run as a second action. ExactFields
//     (or a retrysafe:"exact" tag) opts a field out.
//   - Empty identifying values (null, "", [], {}) are missing: invalid_input,
//     nothing run, nothing stored.
//   - Input is bounded: larger than [Options].MaxInput (1 MiB by default),
//     or an identifying value larger than MaxIdentifyingValue (64 KiB), is
//     invalid_input, nothing run, nothing stored. The loose form of each
//     value and member name is computed once per call.
//
// Input that carries its own key-like field (idempotency_key, request_id, …,
// see [DefaultKeyLikeFields]), at any depth and under any disguise of case,
// separators, lookalike letters or invisible characters, or a value equal to
// one of the tool's request references, is refused with model_supplied_key
// by default; [StripModelKeys] removes such fields instead. Either way they
// never reach the key, the fingerprint or the tool. Input that starts with a
// byte-order mark is refused.
//
// A call without a scope is refused with missing_scope unless the tool has a
// DefaultScope.
//
// Choosing the scope is choosing what counts as the same action. With the
// session set to the conversation, the same email in one conversation is
// one action, however often the model sends it — and a user who really
// wants it twice needs a new session or an action id. With the session set
// to one user turn (the user message's id), each request of the user is a
// new action, and repeats within the turn are one; a resend in a later turn
// after an unknown outcome is then held back only by a principal-wide fence
// (FencePrincipal). With [WithActionID] ("msg-" + the user message's id,
// say), every call of the tool in that context is one action. A
// destination that wants a UUID as the client reference gets one from
// [RequestUUID]. A tool whose destination says it replayed an earlier
// request with the same key tells the call with [DestinationReplayed]; the
// success then says replayed only when the action's record proves an
// earlier call's attempt that may have been the first (otherwise the
// first copy may have been this attempt's own request, sent twice below
// the tool).
//
// # Side-effect classes
//
// Every tool declares a [Class]:
//
//   - [ReadOnly]: retried freely, nothing stored;
//   - [Keyed]: the destination honours the reference as an idempotency key,
//     so every retry — also after an unknown outcome — reuses it;
//   - [Reconcilable]: after an unknown outcome the tool's Reconciler asks the
//     destination what happened, by request reference, before anything else
//     is written; the tool runs again only after a not-applied verdict;
//   - [AtMostOnce]: after an unknown outcome nothing runs again for that key
//     until an [Approver] allows exactly one more attempt or a compensating
//     action; without one the model is told to ask a human.
//
// Errors are classified by envelope.Classify: definite errors are recorded
// and replayed, transient ones retried with the same key (and, when retries
// run out, the key is released: nothing happened), unknown ones handled by
// the tool's class.
//
// # Unknown outcomes
//
// An unknown outcome is a state, not an error to retry. For a Reconcilable
// tool the life of a call continues:
//
//	attempt ends unknown, or the key's record is unknown, or its holder died
//	  → Reconciler.Check(ref)
//	      applied      → success, reconciled: true, the destination's result stored
//	      not applied  → attempt again with the same key
//	      pending, can't say → record unknown; unknown_outcome, next do_not_retry
//
// A record stays unknown until a reconciler, an approver or an operator
// settles it; it never expires silently. An [Operator] lists unknown records
// (per principal or all), shows one, resolves one as applied or not applied
// with who and why, and runs a sweeper that reconciles them in the
// background with bounded concurrency. A record shows whose action it is by
// the label trusted code set with the scope ([WithLabel]: a display name, a
// ticket), stored through the tool's [Codec] and not part of the key.
//
// A call renews its lease for as long as it holds its key (while the tool or
// a check runs, and between attempts), so a slow but live call is not
// presumed dead; a call whose lease was taken over cannot record
// its outcome over the new holder's (fencing). Takeovers by the sweeper, an
// operator, an approver or the fence renew theirs too, so at most one check
// or compensation runs per key at a time. A holder whose renewals keep
// failing has its work cancelled ([ErrLeaseLost]) a sixth of a lease before
// the lease ends.
//
// # The unknown fence
//
// While an action of a tool in a scope (the session, by default: see
// [FenceScope]) is unknown — or being checked or retried after an unknown
// outcome, or approved for one more attempt that has not run yet — no new
// write of that tool in that scope runs. The store decides it in the claim:
// at most one record of a tool and scope holds the scope's slot (running,
// unknown, approved, or just found done), so the rule is the same on one
// process, across replicas and across a restart. A call under a new key
// whose slot holds an unknown action first asks the destination about it
// through the Reconciler: applied settles it as a success and answers
// earlier_action_applied (the call does not run, so the user hears of the
// earlier action first; so are the scope's other new writes of the same
// turn, for Options.NoticeHold); not applied lets the call go on in its place — the
// earlier action is closed as replaced in the claim's transaction, and its
// own resend is told what was done instead; anything else, or no
// reconciler, answers earlier_action_unknown. A retry approved by a person
// or a check is taken by the action's resend or, in its place, by the
// scope's next new write. docs/life-of-a-call.md draws every phase and move.
//
// # Concurrency
//
// Concurrent calls for one key run the tool once: the others wait up to
// Options.WaitTimeout and get the same outcome marked replayed, or
// unknown_outcome with code in_progress and next wait. A call whose
// action another call of the same [Tool] holds (same key, same input)
// waits for it before it claims, rather than race it to the store. Distinct writes of
// one tool in one scope run one after another: a second waits for the
// first, up to WaitTimeout, then answers in_progress naming it. A succeeded
// or failed key replays its stored envelope without running the tool, also
// after a restart with a durable store. [Tool] is safe for concurrent use.
//
// # Caveats
//
//   - Crash windows. A process that dies after the effect but before the
//     outcome is recorded leaves a pending record; when its lease lapses the
//     action is unknown, never free. Keyed tools then retry with the same key,
//     reconcilable ones ask the destination, at-most-once ones wait for an
//     approval.
//   - A Reconciler must answer NotApplied only when the destination can prove
//     the effect is absent and will not appear later; a request still in
//     flight is Pending. A wrong NotApplied is the one way to a duplicate.
//   - If the store cannot be reached the tool is not run (store_unavailable).
//     If the outcome cannot be recorded after the effect, the envelope still
//     tells the truth (success), and the record is treated as unknown once its
//     lease lapses.
//   - A process that stalls (paused, partitioned from the store) for longer
//     than Options.Lease can be presumed dead while its tool still runs; its
//     late outcome is then fenced out and the action reconciled. To keep
//     that reconciliation honest, a call, sweeper or operator that takes
//     over an action whose last attempt may still be in flight counts a
//     not-applied answer as pending until that attempt can no longer land:
//     the lapsed lease's end (or, for an outcome its holder recorded as
//     unknown, the last attempt's start) plus AttemptTimeout plus ClockSkew
//     (the holder stops its attempt before its lease ends, and the attempt
//     timeout bounds a request already on the wire), plus LateWindow for a
//     tool that keeps its request open past the deadline to hear a late
//     answer. The residual risk: a tool that ignores its
//     context and an AttemptTimeout of 0, or clocks further apart than
//     ClockSkew, or a destination that applies a request later than that.
//     A reconciler that knows no request in flight can land (the
//     destination fences stale ones, as boltstore.Store.Effect does)
//     answers reconcile.NotAppliedFenced, which is trusted at once. A
//     destination that checks the claim's fencing token (CallInfo.Token)
//     refuses the stalled holder's late request itself; where it cannot,
//     a pause longer than all of the above lets that request land.
//   - The unknown fence sees actions while they are unknown. Once one is
//     found applied, the tool's other new writes in the scope get
//     earlier_action_applied (a notice kept with the record, seen by every
//     replica): for Options.NoticeHold after the model was told — by the
//     fence's answer, or by the success of the action's own call — which
//     covers the calls it made in the same turn; and, when the sweeper, an
//     operator or an approver settled it, until a call is told of it,
//     whenever it comes (at most Options.NoticeBackstop), and NoticeHold
//     after that. A reworded request after that is a new action: the
//     model has been told. A reworded copy sent within NoticeHold of the
//     answer that told the model is taken for one of the same turn, and
//     held — for good: the store keeps the answer under its key, and the
//     same input asked for again later gets it again.
//   - A scope is one conversation: its writes may be copies of each other
//     in other words. A new write that goes on in place of an action found
//     not applied (or approved for a retry) closes that action for good,
//     whatever it was: distinct concurrent actions (an orchestrator's
//     parallel steps) belong in sessions of their own, or in a tool with
//     FenceOff.
//   - A holder that dies keeps its scope's slot until its lease lapses
//     (Options.Lease): meanwhile the scope's new writes wait and answer
//     in_progress. boltstore ends a dead process's leases when the file is
//     opened again.
//   - The key lifetime (KeyTTL) must cover the retry window plus the lease;
//     construction fails otherwise (I7).
//   - The fingerprint is exact: a cosmetic variant of an earlier action is
//     refused as other input, not merged with it. A second action that
//     differs from an earlier one only in the case or spacing of an
//     identifying value is refused too, unless the field is exact.
package agenttool
