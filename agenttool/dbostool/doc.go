// Package dbostool runs a guarded tool ([agenttool.Tool]) as a step of a
// DBOS workflow (github.com/dbos-inc/dbos-transact-golang), in one line:
// every run of the step — DBOS's retries, its re-execution when it
// recovers a workflow after a crash — is the same action under the same
// key, and the step's outcome is the envelope. agenttool itself does not
// import DBOS.
//
// # Basics
//
//	send, err := agenttool.New("send_email", "Send an email.", sendEmail, agenttool.Options{
//		Store: store, // pgstore: in DBOS's database, in a schema of its own, if you like
//		Class: agenttool.Keyed,
//	})
//	sendStep, err := dbostool.New(send, nil)
//
//	func notify(ctx dbos.Context, in Job) (envelope.Envelope, error) {
//		// trusted workflow code says who acts; the model's arguments are passed apart
//		return sendStep.Run(ctx, dbostool.Call{Principal: in.User, Label: in.UserName, Args: in.Args})
//	}
//	dbos.RegisterWorkflow(dbosCtx, notify)
//
// [Step.Run] is dbos.RunAsStep around Tool.Invoke: inside the step it puts
// the call's principal and label on the step's context
// (agenttool.WithScope, WithLabel), with the action's identity (below),
// and invokes the tool with the model's arguments as they are; the model
// never chooses a key. [Step.Go] is the same through dbos.Go, for steps
// run at once. Both answer the envelope: DBOS records it as the step's
// output and replays it.
//
// # What DBOS guarantees, and what this package adds
//
// DBOS alone: a workflow resumes from its last recorded step; a step it
// recorded is replayed from its checkpoint and never runs again; a step
// that never answered — the process died after the effect, before the
// checkpoint — runs again, at least once; and its step retries run a
// failing step again. Nothing in DBOS knows whether the effect of a run
// that never answered happened.
//
// With dbostool, every run of a step meets retrysafe's record of its
// action: a step recorded by DBOS answers from DBOS's checkpoint without
// calling the tool; a step run again after a crash answers from the
// action's record — the recorded outcome replayed, the destination asked
// (Reconcilable), the reference sent again for the destination to dedupe
// (Keyed), or unknown_outcome (AtMostOnce) — never a second effect; and
// every envelope says what is known (the invariants I1 and I2).
//
// # What makes one action
//
// [ByStep], the default, names the action by the workflow's ID and the
// step's ID, which the step reads from its own context (GetWorkflowID,
// GetStepID), so DBOS's retries and its recovery reach the same key:
// DBOS numbers steps in the order the workflow's code calls them, and
// runs that code again, in the same order, when it recovers it. The
// input's fingerprint is still compared: a recovered step whose
// arguments changed is refused (key_reused_with_different_input). Two
// steps are two actions, even with the same input — what a workflow that
// decides to send two reminders means. Steps of a workflow that give
// the same [Call].Step are one action.
//
// [ByInput] keys by the tool's identifying fields within the call's
// Session (the conversation; the workflow's ID if it has none), as any
// guarded call in an agent loop: a model that repeats a call in a later
// step — a new step, a new step ID — meets the same key, and the unknown
// fence holds the tool's other writes in the conversation while one is
// unknown. Use it where the model proposes the calls.
//
// ByStep is the default because it is what DBOS owns and what a workflow
// means by a step: the action is the step, whatever the model wrote into
// its arguments; steps run in parallel are not serialised; and a fork
// does what a fork is for. A workflow that lets a model decide whether to
// call the tool again must choose ByInput: under ByStep the model's
// repeat in a later step is another action, and runs. So under ByStep an
// unknown outcome never tells its reader to call again later (the
// advice of a Keyed tool's unknown outcome, true of its reference): its
// next is do_not_retry, and its note says that only this step run again
// (or a step of the same Call.Step) learns what became of the action.
// Run and Go belong to the workflow itself: called inside a step of the
// workflow's own, where DBOS runs them as plain calls under that step's
// ID, they refuse (ErrInvalidCall).
//
// A workflow ID reused returns the earlier workflow's result (DBOS's
// default WorkflowIDReusePolicyReturnExisting; the reject policy refuses
// it): nothing runs, the tool is not called. dbos.ForkWorkflow starts a
// new workflow, under a new ID, that copies the steps before StartStep
// and runs the others again: under ByStep they are new actions, and act
// again — forking is how a workflow is told to do it again; under
// ByInput with the conversation carried in the workflow's input (set
// Call.Session from it), the fork meets the actions it repeats and
// replays them.
//
// # Parallel steps
//
// DBOS runs steps at once through dbos.Go (Step.Go), numbering each when
// it is started; RunAsStep from goroutines of one's own is not
// supported by DBOS. Under ByStep each action is its own session, so the
// tool's fence (one write of a tool at a time per principal and session,
// none while an earlier one is unknown) holds only the action itself:
// parallel steps run at once, and one that ends unknown holds up no
// other. A tool built with FencePrincipal asks for more, and gets it:
// its writes run one at a time per principal, across workflows, and a
// step that another workflow's action, found done after its outcome was
// unknown, holds back (earlier_action_applied) keeps that answer — run
// again as the same step, it answers the same; a workflow that still
// wants that write runs it as a new step. Under
// ByInput the fence is the conversation's, as in any agent loop: writes
// of one tool in one conversation run one after another (a second waits
// for the first; see "Crashes and leases"), and an unknown one holds the
// others.
//
// # One retry owner
//
// By default the tool owns retries: its RetryPolicy retries inside one
// call, under the same reference, only where the key makes it safe, and
// DBOS runs the step once. [Options].StepRetries makes DBOS the owner
// instead: the tool must make one attempt per call (Retry.MaxAttempts
// 1), and the step fails — so that DBOS runs it again, after its own
// backoff, under the same key — only when another attempt can change the
// envelope: unavailable, and a Keyed tool's outcome_unknown with next
// wait (the retry its RetryPolicy would have made; the destination
// dedupes the reference). Any other unknown
// outcome is the step's outcome at once: DBOS never retries it blindly.
// When DBOS's retries run out, the last envelope is the step's outcome.
// New refuses both owners at once ([ErrRetriesMultiply]): every DBOS
// retry would run a whole round of the tool's attempts.
//
// # Crashes and leases
//
// The step's outcome is what DBOS records and replays for good, so it is
// always an answer about the action: a call whose answer is about itself
// alone — store_unavailable (the record could not be read), in_progress
// (another run holds the action), cancelled — is made again inside the
// step, after the envelope's retry_after or a pause growing to 5s, for as
// long as the workflow runs. A process that dies while its step runs
// leaves the action's record pending under its lease (agenttool
// Options.Lease); the step DBOS runs again after the restart waits it
// out, then settles the action (checks it, resends it under its
// reference, or finds it unknown). A shorter lease gets a recovered
// workflow going sooner; it must still outlast the pauses of a live
// process (agenttool's caveats). A step that waits on a store that is
// down waits until it is back: cancel the workflow to stop it, and DBOS
// records nothing.
//
// # One database
//
// pgstore may share DBOS's PostgreSQL database: DBOS keeps its tables in
// its schema (dbos, Config.DatabaseSchema), pgstore in its own
// (pgstore.Options.Schema, retrysafe by default). Each migrates its own
// schema; neither reads the other's. The step's checkpoint and the
// action's record are separate writes: retrysafe's record comes first,
// which is what lets a step run again after a crash meet it.
//
// # Caveats
//
//   - A succeeded action whose step DBOS never recorded (the process died
//     after retrysafe recorded the outcome, before DBOS's checkpoint) is
//     replayed from retrysafe's record for as long as the tool's KeyTTL
//     keeps it (24h by default). DBOS recovers a workflow when its
//     executor launches again, and an operator may resume a cancelled one
//     at any time: one that comes later meets no record, and runs the
//     action again. Keep KeyTTL longer than that.
//   - A workflow cancelled while its step runs: DBOS does not record the
//     step; Run returns the envelope the call answered, if any, with
//     dbos.ErrWorkflowCancelled, and the workflow must return. Resumed,
//     the step runs again and meets the same action.
//   - Step IDs depend on the order of the workflow's calls: keep the
//     workflow deterministic, as DBOS requires. A step recovered by
//     another version of the code is the same action only if it has the
//     same number; its tool and input are checked (another tool is
//     another key, other input is refused).
//   - StepName (the tool's name by default) is compared by DBOS when it
//     replays a recorded step: keep it while workflows that ran it may be
//     recovered.
//   - When DBOS owns retries, it logs each one ("step failed, retrying")
//     at level ERROR; the step error names the envelope's code and
//     reference.
//
// A [Step] is safe for concurrent use.
package dbostool
