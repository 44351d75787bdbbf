// Package temporaltool runs guarded tools as Temporal activities
// (go.temporal.io/sdk). Temporal retries an activity until it completes,
// so every effect of an unguarded activity happens at least once;
// temporaltool makes every attempt of one action the same action under
// the same key, and hands the workflow the envelope — success,
// definite_failure or unknown_outcome — never a blind retry. agenttool
// itself does not import the SDK.
//
// # Basics
//
//	// The worker: the tool leaves retries to Temporal and bounds each attempt.
//	send, err := agenttool.New("send_email", "Send one email.", sendEmail, agenttool.Options{
//		Store: store, Class: agenttool.Keyed,
//		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, AttemptTimeout: 30 * time.Second,
//	})
//	sendAct, err := temporaltool.Register(w, send, nil) // w is a worker.Worker
//
//	// The workflow: trusted code says who acts; the model wrote args, so a repeat
//	// of them in a later activity is the same action (ByInput; the default is ByStep).
//	env, err := temporaltool.Execute(ctx, sendAct, temporaltool.Call{Principal: "tenant-42/user-7", Args: args, Identity: temporaltool.ByInput})
//	messages = append(messages, toolMessage(callID, env.String())) // the model reads every outcome
//
// [Execute] returns the envelope whatever became of the call; its error
// is not nil only when nothing ran (a configuration that does not fit,
// [ErrConfig]). [Start] returns a [Future] instead, to run calls side by
// side. A workflow that does not run the tool's worker still needs the
// same [Activity] for its name and timeouts.
//
// # Composition
//
// One call is: RetryPolicy(Activity(Heartbeat(Envelope(Claim(AttemptTimeout(tool)))))).
// Temporal retries the activity; each attempt is one guarded call
// (Tool.Invoke), which claims the action's key before the tool runs.
//
// # Scope comes from the workflow
//
// The workflow hands the activity a [Call]: the model's arguments as it
// wrote them, and the principal, session and label that trusted workflow
// code chose. The activity puts them on its context (agenttool.WithScope,
// WithLabel, WithActionID) and calls Invoke with the arguments: nothing
// the model writes reaches the key but the tool's identifying fields.
//
// # Action identity
//
// Every attempt of one activity is the same action: its Call, and the
// IDs it is keyed by, are the same on every retry. Beyond that, the
// Call's [Identity] says what one action is.
//
// ByStep, the default: the workflow's code decides each step, and a step
// is one activity. The key comes from the step, not the arguments
// (agenttool.WithActionID): by default the activity's ID, the same on
// every retry, in the session of the run. An activity ID is unique only
// within a run — it starts again after Continue-As-New — and a workflow
// ID may be reused by a later execution, so the run is named by the ID a
// reset keeps (OriginalRunID): new in each run of Continue-As-New, a
// workflow retry, a cron run and a new execution; kept by a reset, whose
// steps after its point meet their records and are replayed (refused, if
// their input differs: key_reused_with_different_input). Call.Step names
// a step across activities — a step the workflow calls again, after an
// unknown outcome or with an approval, meets its key — and Call.Session
// can carry it across runs. ByStep is the default because it is what
// Temporal owns and what a workflow means by an activity: the action is
// the step, whatever its arguments, and steps run side by side (below).
//
// ByInput: the model proposes the calls, each in an activity of its own,
// and may repeat or reword one in a later activity — after an unknown
// outcome above all. The key comes from the tool's identifying fields
// within the session, the conversation, as in any agent loop: a repeat
// meets the same key (replayed, or its unknown outcome), a reworded copy
// meets the unknown fence. The default session is the workflow ID and
// the first run's ID (FirstRunID): the chain of runs Temporal keeps
// across Continue-As-New (an agent loop continues as new to keep its
// history short), a workflow retry and a reset (the model proposes the
// same calls again) — but not across a later execution that reuses the
// workflow ID, which is, to Temporal, another history. A conversation
// that spans executions (a workflow per user turn) sets Call.Session to
// its own id. Each run of a cron workflow is a conversation of its own,
// although Temporal chains them too. A workflow whose model chooses the
// calls must choose ByInput: under ByStep the model's repeat, a new
// activity, is a new action, and runs — a second email. So under ByStep
// an unknown outcome never says "call again later with the same input"
// (a Keyed tool's advice, and in_progress's, true of the same action):
// [Future.Get] makes its next do_not_retry, and its note says that only
// the same step called again (Call.Step) learns what became of it.
//
//	                                   ByStep (run)              ByInput (conversation)
//	a retry of the activity            the same action           the same action
//	Continue-As-New                    new steps                 the same conversation
//	a reset                            the same steps, replayed  the same conversation
//	a workflow retry                   new steps                 the same conversation
//	a cron run                         new steps                 a new conversation
//	a new execution, same workflow ID  new steps                 a new conversation
//
// # Parallel calls
//
// agenttool's default fence (FenceSession) runs one write of a tool at a
// time in a session, and holds its new writes while an earlier one is
// unknown. Under ByStep each step is a session of its own
// ("session/step"): steps of one tool started together run side by
// side, and a step whose outcome is unknown holds back no other — the
// steps are the workflow's, not a model's copies of each other. A tool
// whose Fence is FencePrincipal is still serialised across them: that
// was asked for — and a step that another workflow's action, found done
// after its outcome was unknown, holds back (earlier_action_applied)
// keeps that answer: run again as the same step, it answers the same; a
// workflow that still wants that write runs it as a new step. Under ByInput the fence stays, as in every agent loop:
// two calls of one turn may be one action in other words. Calls of one
// tool started together in one conversation run one after the other (a
// later one waits up to WaitTimeout, then answers in_progress, which
// Temporal retries), and after an unknown outcome the tool's new writes
// in the conversation answer earlier_action_unknown until it is settled.
// Calls of different tools are never held by each other.
//
// # One owner of retries
//
// Temporal retries the activity; agenttool's RetryPolicy retries inside
// one call. Both would multiply the attempts and the time, and the
// retries inside a call are invisible to Temporal and held in a worker
// that may die. Temporal owns them: [New] refuses a tool whose
// Retry.MaxAttempts is above 1 (the default is 3), naming the fix, unless
// [Options].ToolRetries keeps both. Each of Temporal's retries is a new
// guarded call of the same action under the same key, so it is as safe as
// a retry inside the call. One thing is lost: a Keyed tool retries inside
// its call after an ambiguous attempt (the destination dedupes), while an
// unknown_outcome is never a reason for Temporal to retry (see below); the
// workflow, or the model, calls again with the same input to resend it.
//
// # Timeouts
//
// A call must end before Temporal cuts its activity: an attempt cut short
// leaves its action unknown. [Activity.Budget] is the longest call the
// tool's settings allow (WaitTimeout, three checks of CheckTimeout,
// AttemptTimeout, the retry window if the tool retries, three store
// writes of StoreTimeout; not an Approver, nor a tool or store that
// ignores its context). New refuses a tool without an AttemptTimeout.
// [Activity.ActivityOptions] sets StartToCloseTimeout above the budget;
// HeartbeatTimeout to the tool's Lease (a retry can do nothing for the
// action until the lease of a dead attempt lapses, so noticing sooner
// buys nothing); and ScheduleToCloseTimeout to KeyTTL less Lease and
// ClockSkew, so that no retry outlives the action's record (invariant
// I7: a retry that found the record gone would act again). [Start] fills
// the timeouts the workflow left unset from them, and refuses, before
// anything runs, timeouts that do not fit; the activity checks the
// timeouts the server gave it the same way, and refuses to run. An
// attempt that starts with less of ScheduleToCloseTimeout left than the
// budget (a late retry, a long wait in the queue) does not run either: it
// ends Temporal's retries with ErrorTypeNotDone, not retryable. So a
// ScheduleToCloseTimeout must leave a second beyond the budget for the
// first attempt to be dispatched and started; one that does not is
// refused with the others.
//
// # What the activity returns
//
// The envelope is the activity's result: success, definite_failure and
// unknown_outcome alike. A definite failure is a result rather than a
// non-retryable error: it is an answer the model must read (fix your
// input, the card was declined), recorded in the workflow's history as
// the activity's result, and not a failure of the workflow's machinery.
// An unknown_outcome is never a retryable error: retrying it is the blind
// retry this package exists to prevent, and what may be retried after
// one is decided by the tool's class, inside the next call.
//
// An answer that says the attempt did nothing, and that the same call
// may be sent again under the same key, is a retryable error of type
// [ErrorTypeNotDone] that carries the envelope and the attempt's number:
// store_unavailable (the key could not be claimed), unavailable (every
// try failed before it could act; the key was given back), cancelled
// (before the tool ran; a CanceledError when Temporal cancelled it), and
// in_progress. in_progress is what a retry answers when it finds the
// action still held by an earlier attempt — a worker stalled past its
// HeartbeatTimeout, which Temporal gave up on but which may still act:
// the retry waits for it (up to WaitTimeout), and does not run the tool.
// It is not the action's outcome, which is about to be known: Temporal
// asks again (after the envelope's retry_after, as NextRetryDelay, when
// the holder has stopped renewing its lease), and the next attempt
// replays what the first recorded, or, once its lease has lapsed, takes
// the action over as any unknown one: a Keyed tool resends under the
// same key, a Reconcilable one asks the destination, an AtMostOnce one
// answers unknown_outcome.
//
// # What the workflow gets
//
// [Future.Get] turns every end of the activity into an envelope that
// tells no lie:
//
//	the activity's result                       the envelope
//	ErrorTypeNotDone, Temporal's retries ended:
//	  the first attempt's                       its envelope (it was the only attempt)
//	  in_progress                               its envelope (unknown_outcome, naming the action)
//	  a later attempt's                         unknown_outcome: an earlier attempt may have acted
//	a timeout, a panic, a lost worker,          unknown_outcome, without a reference: next wait
//	  the workflow cancelled while it ran         (ByInput: the same call again meets the action)
//	                                            or ask_human (ByStep)
//	ErrorTypeConfig of the first attempt,       an error; nothing ran
//	  or not scheduled
//	ErrorTypeConfig of a later attempt (a       unknown_outcome, without a reference:
//	  worker of another build refused), or        an earlier attempt may have acted
//	  of a worker that does not say which
//
// # Heartbeats and cancellation
//
// While the call runs, the activity heartbeats every third of its
// HeartbeatTimeout, so that Temporal can tell a dead worker from a slow
// call. The call runs on the activity's context, through which Temporal
// cancels it (the workflow's request, arriving with a heartbeat's answer;
// a timeout; the worker's shutdown): before the tool runs, nothing runs
// (cancelled); during an attempt, the attempt is cut, and its outcome is
// unknown — recorded by agenttool on a context that outlives the
// cancellation, never taken for not done.
//
// # Approvals by signal
//
// An AtMostOnce tool whose Approver is a [WorkflowApprover] takes a
// person's decision from the workflow: the workflow waits for a signal
// (or an update), puts the [Approval] in the Call, and calls again; the
// call meets the action's key (the same arguments under ByInput, the same
// Call.Step under ByStep), asks the approver, and runs once more only for
// an approval of this action (RequestRef) and of this outcome (Attempts).
// A ByStep call that carries an approval and no Call.Step is refused
// ([ErrConfig]): it would be a new activity, a new action, and run again.
//
//	env, err := temporaltool.Execute(ctx, refundAct, c)
//	for err == nil && env.Status == envelope.UnknownOutcome && env.Next == envelope.AskHuman {
//		// A person checks reference env.RequestRef and signals, e.g.
//		// temporal workflow signal --name approval --input '{"request_ref":"…","decision":"retry_once","by":"ana","attempts":1}'
//		var ok temporaltool.Approval
//		workflow.GetSignalChannel(ctx, "approval").Receive(ctx, &ok)
//		c.Approval = &ok
//		env, err = temporaltool.Execute(ctx, refundAct, c)
//	}
//
// An approval for another action, or for an outcome the action has since
// moved past, allows nothing (the envelope says so); agenttool records
// who decided, and one approval allows one attempt.
//
// # MCP tools
//
// Temporal's Google ADK integration (go.temporal.io/sdk/contrib/googleadk,
// since moved to go.temporal.io/googleadk; neither resolves as a module
// here) runs each MCP tools/call through an activity of its own
// (CallMcpTool), which Temporal retries like any activity, with no key.
// In its place, guard the server's tools on the worker with
// agenttool/mcptool, and register each:
//
//	tools, err := mcptool.Tools(ctx, session, mcptool.ClientOptions{ByName: map[string]agenttool.Options{
//		"create_ticket": {Store: store, Class: agenttool.AtMostOnce,
//			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, AttemptTimeout: 30 * time.Second},
//	}})
//	for _, t := range tools {
//		acts[t.Name()], err = temporaltool.Register(w, t, nil)
//	}
//
// The workflow calls them with Execute, with Identity ByInput. mcptool's client
// classes each answer by what it proves (a timeout is unknown, not a
// failure); Keyed is for servers that answer with retrysafe envelopes.
//
// # What Temporal guarantees, and what this adds
//
// Temporal alone: an activity runs at least once and is retried until it
// completes or its retries end; a heartbeat timeout tells a dead worker;
// a completed activity's result is in the workflow's history, and a
// replay of the workflow reads it instead of running it again. It does
// not know whether an attempt that timed out or lost its reply acted; it
// starts a retry while a stalled attempt may still act; an activity ID is
// unique only within a run; and a model's repeat in a later activity is,
// to Temporal, another activity. With this package: every attempt of an
// action meets one key, and the tool runs at most once per key (I1); a
// retry that meets a live attempt waits for it; an unknown outcome stays
// unknown until the destination, an approver or an operator settles it;
// the model's repeats in later activities meet the key or the fence; and
// the workflow hears the truth in an envelope.
//
// # Caveats
//
//   - The Call (the model's arguments, the principal, an approval) and the
//     envelope (results) are kept in the workflow's history; encrypt them
//     with a Temporal payload codec. The tool's Codec covers only its store.
//   - Activities still pending when a workflow continues as new are
//     abandoned, not stopped: under ByStep, a step the new run schedules
//     again is a new action. Wait for them first, or name the step
//     (Call.Step) in a session carried across the runs (Call.Session).
//   - A record lives KeyTTL: a reset, a named step called again or, in
//     ByInput, a repeat later than that is a new action.
//   - The SDK's test environment leaves FirstRunID and OriginalRunID
//     empty (the run ID stands in), tells the activity no retry policy
//     (the activity then counts on retries without end), and retries an
//     attempt only after it has returned, so a retry never overlaps the
//     attempt it retries there.
package temporaltool
