package temporaltool

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// Registry is where an activity is registered: a worker.Worker, or one of
// the SDK's test environments.
type Registry interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Options configure an [Activity]. nil Options take the defaults; so does
// every zero field.
type Options struct {
	// Name is the activity's type name. Default: the tool's name.
	Name string
	// ToolRetries lets the tool retry inside one attempt of the activity
	// (its Retry.MaxAttempts above 1) while Temporal retries the activity
	// too. Without it such a tool is refused: Temporal owns the retries.
	// Set it only for a Keyed tool whose destination answers ambiguously
	// and often, to retry under the same key within the attempt rather
	// than hand the workflow an unknown outcome; the attempts then
	// multiply (the tool's times Temporal's), and the activity's
	// StartToCloseTimeout must cover the tool's retry window.
	ToolRetries bool
}

// Activity is a guarded tool as a Temporal activity. An Activity is safe
// for concurrent use.
type Activity struct {
	tool     *agenttool.Tool
	name     string
	settings agenttool.Settings
	budget   budget
}

// New returns t as an activity. It refuses, with an error wrapping
// [ErrConfig] that names the fix, a tool that retries inside one call
// (Retry.MaxAttempts above 1) unless o.ToolRetries allows it, and a tool
// without an AttemptTimeout.
func New(t *agenttool.Tool, o *Options) (*Activity, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: the tool is nil", ErrConfig)
	}
	var opts Options
	if o != nil {
		opts = *o
	}
	s := t.Settings()
	a := &Activity{tool: t, name: opts.Name, settings: s, budget: budgetOf(s)}
	if a.name == "" {
		a.name = t.Name()
	}
	if s.Retry.MaxAttempts > 1 && !opts.ToolRetries {
		return nil, fmt.Errorf("%w: tool %q retries inside one call (Retry.MaxAttempts %d; 0 means 3), and Temporal retries the activity: "+
			"one owner of retries is enough, and two multiply the attempts. Build the tool with Retry: agenttool.RetryPolicy{MaxAttempts: 1} "+
			"and let the activity's retry policy retry it under the same key, or set temporaltool.Options.ToolRetries to keep both",
			ErrConfig, t.Name(), s.Retry.MaxAttempts)
	}
	if s.AttemptTimeout <= 0 {
		return nil, fmt.Errorf("%w: tool %q has no AttemptTimeout: an attempt would end only when Temporal cuts the activity, "+
			"leaving its outcome unknown, and no StartToCloseTimeout could be said to cover a call; set agenttool.Options.AttemptTimeout",
			ErrConfig, t.Name())
	}
	return a, nil
}

// Register returns t as an activity ([New]) registered on r under its
// name. A worker's registration panics on a second activity of one name.
func Register(r Registry, t *agenttool.Tool, o *Options) (*Activity, error) {
	a, err := New(t, o)
	if err != nil {
		return nil, err
	}
	a.Register(r)
	return a, nil
}

// Register registers the activity's function ([Activity.Run]) on r under
// its name.
func (a *Activity) Register(r Registry) {
	r.RegisterActivityWithOptions(a.Run, activity.RegisterOptions{Name: a.name})
}

// Name returns the activity's type name.
func (a *Activity) Name() string { return a.name }

// Tool returns the guarded tool.
func (a *Activity) Tool() *agenttool.Tool { return a.tool }

// Identity says what makes one action of a call: see "Action identity"
// in the package doc.
type Identity string

const (
	// ByStep keys a call by its step: the activity (its ID, the same on
	// every retry) of one run, or Call.Step. Each step is a session of its
	// own, so steps run in parallel and one step's unknown outcome holds
	// back no other. The default.
	ByStep Identity = "step"
	// ByInput keys a call by the tool's identifying fields within the
	// session (the conversation): a model that repeats or rewords a call
	// in a later activity meets the same key, or the unknown fence. Use it
	// where a model proposes the calls.
	ByInput Identity = "input"
)

// Call is what a workflow hands the activity: the model's arguments as it
// wrote them, and the scope that trusted workflow code gives them. It is
// serialised into the workflow's history, approvals included. Build it in
// workflow code, never from the model's output beyond Args.
type Call struct {
	// Args is the tool's input as the model wrote it: a JSON object (or
	// text, for a TextInput tool). retrysafe alone reads it.
	Args string `json:"args"`
	// Principal is who acts: a tenant, a user. Required (missing_scope
	// otherwise).
	Principal string `json:"principal"`
	// Session is the window within which calls are one action when they
	// are alike. [Start] sets it when empty: for ByInput, the workflow's
	// chain of runs (the workflow ID and its first run's ID); for ByStep,
	// the run (the workflow ID and the run ID a reset keeps). The
	// activity refuses a call without one.
	Session string `json:"session,omitempty"`
	// Label tells an operator whose action a record is (agenttool.WithLabel):
	// a user's name, a ticket, the workflow's ID.
	Label string `json:"label,omitempty"`
	// Identity is ByStep (the default) or ByInput.
	Identity Identity `json:"identity,omitempty"`
	// Step names the step, under ByStep: calls of one step are one action
	// across activities, so that a workflow can call a step again (after
	// an unknown outcome, with an approval) and meet its key. Default: the
	// activity's ID, which is the same on every retry of the activity and
	// new for each activity.
	Step string `json:"step,omitempty"`
	// Approval is a person's decision about the action's unknown outcome,
	// for a tool whose Approver is a [WorkflowApprover]. Under ByStep it
	// needs Step: without one the call is a new action, and is refused.
	Approval *Approval `json:"approval,omitempty"`
}

// Run is the activity: it runs one guarded call of c on a context that
// carries c's scope, label, action id (ByStep) and approval, heartbeats while
// the call runs, and returns the envelope as the activity's result — a
// success, a definite failure or an unknown outcome alike. An answer that
// says this attempt did nothing and may be sent again under the same key
// (store_unavailable, unavailable, cancelled before the tool ran,
// in_progress) is returned instead as a retryable error of type
// [ErrorTypeNotDone] carrying the envelope, so that Temporal retries it;
// NextRetryDelay is the envelope's RetryAfter, when it has one. An
// activity whose timeouts do not fit the tool, or whose Call cannot be
// scoped, refuses to run with a non-retryable error of type
// [ErrorTypeConfig]; an activity told no retry policy (an older server,
// the SDK's test environment) counts on retries without end.
func (a *Activity) Run(ctx context.Context, c Call) (envelope.Envelope, error) {
	info := activity.GetInfo(ctx)
	var maxAttempts int32
	if p := info.RetryPolicy; p != nil {
		maxAttempts = p.MaximumAttempts
	}
	if err := a.fits(info.StartToCloseTimeout, info.ScheduleToCloseTimeout, maxAttempts); err != nil {
		return envelope.Envelope{}, refuse(err, info.Attempt)
	}
	call, err := a.scoped(ctx, info.ActivityID, c)
	if err != nil {
		return envelope.Envelope{}, refuse(err, info.Attempt)
	}
	if info.ScheduleToCloseTimeout > 0 {
		// ScheduleToCloseTimeout bounds all attempts together, from the
		// first one's scheduling (the SDK cuts the attempt's context there):
		// a retry, or an attempt that waited in the queue, may have less
		// time left than the timeouts above promise. A call it cannot
		// finish is not begun.
		if left := time.Until(info.ScheduledTime.Add(info.ScheduleToCloseTimeout)); left < a.Budget() {
			return envelope.Envelope{}, a.tooLate(left, info.Attempt)
		}
	}
	stop := heartbeat(ctx, info.HeartbeatTimeout/3)
	defer stop() // also when the tool panics
	env := a.tool.Invoke(call, c.Args)
	stop()
	return answer(ctx, env, info.Attempt)
}

// scoped returns ctx carrying the scope, label, action id and approval of
// c, run as the activity activityID.
func (a *Activity) scoped(ctx context.Context, activityID string, c Call) (context.Context, error) {
	if c.Session == "" {
		return nil, fmt.Errorf("%w: activity %s: Call.Session is empty; start the call with temporaltool.Start or Execute, "+
			"which set it from the workflow, or set it yourself", ErrConfig, a.name)
	}
	switch c.Identity {
	case ByInput:
		if c.Step != "" {
			return nil, fmt.Errorf("%w: activity %s: Call.Step %q is for ByStep; a ByInput call is one action by its arguments", ErrConfig, a.name, c.Step)
		}
		ctx = agenttool.WithScope(ctx, c.Principal, c.Session)
	case "", ByStep:
		if c.Step == "" && c.Approval != nil {
			return nil, fmt.Errorf("activity %s: %w", a.name, errApprovalWithoutStep)
		}
		step := "activity:" + activityID
		if c.Step != "" {
			step = "step:" + c.Step
		}
		// A session of the step's own: the unknown fence of one step holds
		// back no other, and parallel steps run side by side.
		ctx = agenttool.WithScope(ctx, c.Principal, c.Session+"/"+step)
		ctx = agenttool.WithActionID(ctx, step)
	default:
		return nil, fmt.Errorf("%w: activity %s: Call.Identity %q is neither %q nor %q", ErrConfig, a.name, c.Identity, ByStep, ByInput)
	}
	if c.Label != "" {
		ctx = agenttool.WithLabel(ctx, c.Label)
	}
	if c.Approval != nil {
		ctx = context.WithValue(ctx, approvalKey{}, *c.Approval)
	}
	return ctx, nil
}

// tooLate is the error of an attempt that did not run because the time
// Temporal left it, left, is short of the longest call: did nothing, and
// not retryable, since a retry would have less time still.
func (a *Activity) tooLate(left time.Duration, attempt int32) error {
	env := envelope.Envelope{Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: a.tool.Name(), Next: envelope.Wait,
		Error: &envelope.Error{Code: envelope.CodeUnavailable, Message: fmt.Sprintf(
			"attempt %d of activity %s was not run: %v was left before Temporal's deadline (ScheduleToCloseTimeout), short of the longest call of the tool, %v",
			attempt, a.name, left.Round(time.Millisecond), a.Budget())},
		Note: "This was not done: it was started too late to finish. Calling it again is safe."}
	return temporal.NewApplicationErrorWithOptions(env.Error.Message, ErrorTypeNotDone, temporal.ApplicationErrorOptions{
		NonRetryable: true, Details: []any{env, attempt}})
}

// refuse is the error of an attempt that does not run: not retryable. It
// carries the attempt's number: a later attempt's refusal (a worker of
// another build, with other settings) says nothing of what the earlier
// ones did.
func refuse(err error, attempt int32) error {
	return temporal.NewApplicationErrorWithOptions(err.Error(), ErrorTypeConfig, temporal.ApplicationErrorOptions{NonRetryable: true,
		Details: []any{attempt}})
}

// heartbeat records a heartbeat every interval until stop is called or
// ctx ends (the activity is over, timed out or cancelled: the SDK tells a
// cancellation through the heartbeat's answer, by ending ctx). No
// interval, no heartbeats.
func heartbeat(ctx context.Context, every time.Duration) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}
