package temporaltool

import (
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool/internal/durable"
	"github.com/retrysafe/retrysafe/envelope"
)

// Execute runs one guarded call from a workflow: [Start], then
// [Future.Get].
func Execute(ctx workflow.Context, a *Activity, c Call) (envelope.Envelope, error) {
	return Start(ctx, a, c).Get(ctx)
}

// Start schedules one guarded call as the activity a, from workflow code,
// and returns its future. It sets c.Session when empty (see [Call]) and
// runs the activity with the activity options on ctx, whose unset
// StartToCloseTimeout, HeartbeatTimeout and ScheduleToCloseTimeout take
// the tool's ([Activity.ActivityOptions]). Timeouts set on ctx that do not
// fit the tool — a StartToCloseTimeout shorter than the longest call, a
// ScheduleToCloseTimeout that lets a retry outlive the action's record —
// and a Call in a mode it does not fit are not run: the future's Get
// returns an error wrapping [ErrConfig] that names the fix.
func Start(ctx workflow.Context, a *Activity, c Call) *Future {
	f := &Future{tool: a.tool.Name()}
	opts, err := a.optionsFor(workflow.GetActivityOptions(ctx))
	if err == nil {
		err = a.check(&c, workflow.GetInfo(ctx))
	}
	f.mode = c.Identity
	if err != nil {
		fut, set := workflow.NewFuture(ctx)
		set.SetError(err)
		f.f, f.err = fut, err
		return f
	}
	f.f = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), a.name, c)
	return f
}

// optionsFor returns o with the tool's timeouts where o has none, or an
// error if a timeout o sets does not fit the tool.
func (a *Activity) optionsFor(o workflow.ActivityOptions) (workflow.ActivityOptions, error) {
	d := a.ActivityOptions()
	if o.StartToCloseTimeout == 0 {
		o.StartToCloseTimeout = d.StartToCloseTimeout
	}
	if o.HeartbeatTimeout == 0 {
		o.HeartbeatTimeout = d.HeartbeatTimeout
	}
	if o.ScheduleToCloseTimeout == 0 {
		o.ScheduleToCloseTimeout = d.ScheduleToCloseTimeout
	}
	var maxAttempts int32
	if o.RetryPolicy != nil {
		maxAttempts = o.RetryPolicy.MaximumAttempts
	}
	return o, a.fits(o.StartToCloseTimeout, o.ScheduleToCloseTimeout, maxAttempts)
}

// check completes c for the workflow of info, or says why it cannot run.
func (a *Activity) check(c *Call, info *workflow.Info) error {
	switch c.Identity {
	case "":
		c.Identity = ByStep
	case ByStep, ByInput:
	default:
		return fmt.Errorf("%w: Call.Identity %q is neither %q nor %q", ErrConfig, c.Identity, ByStep, ByInput)
	}
	if c.Identity == ByInput && c.Step != "" {
		return fmt.Errorf("%w: Call.Step %q is for ByStep; a ByInput call is one action by its arguments", ErrConfig, c.Step)
	}
	if c.Identity == ByStep && c.Step == "" && c.Approval != nil {
		return errApprovalWithoutStep
	}
	if c.Session == "" {
		c.Session = session(info, c.Identity)
	}
	return nil
}

// session is the default session of a call of identity m from the workflow
// of info: the workflow ID, and the ID of the run that starts its window.
//
// ByInput: the conversation is the chain of runs — FirstRunID, kept across
// Continue-As-New, a workflow retry and a reset — but each run of a cron
// workflow is a conversation of its own (the chain links them too).
// ByStep: the run, as a reset keeps it (OriginalRunID): steps of one run are
// its own, since the activity IDs that name them begin again in a new run.
// A test environment leaves both IDs empty: the run's ID stands in.
func session(info *workflow.Info, m Identity) string {
	run := info.WorkflowExecution.RunID
	switch {
	case m == ByStep || info.CronSchedule != "":
		if info.OriginalRunID != "" {
			run = info.OriginalRunID
		}
	case info.FirstRunID != "":
		run = info.FirstRunID
	}
	return info.WorkflowExecution.ID + "/" + run
}

// Future is a guarded call started by [Start]. Use it from the workflow
// that started it, as a workflow.Future.
type Future struct {
	f    workflow.Future
	err  error // why the call was not started
	tool string
	mode Identity
}

// Get waits for the call and returns its envelope: the activity's result
// as it is; or, when the activity ended in an error, an envelope that
// tells no lie (see "What the workflow gets" in the package doc):
// unknown_outcome whenever the tool may have acted. The error is not nil
// only when the call was not run: a configuration that does not fit
// (wrapping [ErrConfig]), or an activity the SDK refused to schedule.
func (f *Future) Get(ctx workflow.Context) (envelope.Envelope, error) {
	var raw json.RawMessage
	err := f.f.Get(ctx, &raw)
	if f.err != nil {
		return envelope.Envelope{}, f.err
	}
	if err != nil {
		return f.settle(err)
	}
	env, err := envelope.Parse(raw)
	if err != nil {
		return f.unknown("", 0, fmt.Sprintf("the tool's activity answered with something that is not an envelope (%v); it may have acted", err)), nil
	}
	if f.mode == ByStep {
		env = durable.StepAdvice(env)
	}
	return env, nil
}

// IsReady reports whether Get would not block.
func (f *Future) IsReady() bool { return f.f.IsReady() }

// Underlying returns the activity's workflow.Future, for a
// workflow.Selector; read the call's outcome with Get.
func (f *Future) Underlying() workflow.Future { return f.f }
