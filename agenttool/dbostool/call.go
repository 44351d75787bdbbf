package dbostool

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/retrysafe/retrysafe/agenttool"
)

// Identity says what makes one action of a Step's tool: what its calls
// share a key by.
type Identity uint8

const (
	// ByStep: the action is the workflow's step, named by the workflow's
	// ID and the step's ID (or the Call's Step), whatever the input
	// says. DBOS's step retries and its recovery after a crash reach the
	// same key; another step is another action, even with the same input.
	// Each action is its own session, so that steps run in parallel are
	// neither serialised by the tool's fence nor held by another step's
	// unknown outcome. For calls the workflow decides to make. The
	// default.
	ByStep Identity = iota
	// ByInput: the action is what the tool's identifying fields say,
	// within the Call's Session (the workflow's ID if it has none), as
	// for any guarded call in an agent loop. A model that repeats a call
	// in a later step meets the same key, and the tool's unknown fence
	// holds its other writes in the session while one is unknown. For
	// calls a model proposes.
	ByInput
)

func (i Identity) String() string {
	switch i {
	case ByStep:
		return "by-step"
	case ByInput:
		return "by-input"
	}
	return fmt.Sprintf("Identity(%d)", uint8(i))
}

// Call is one call of a Step's tool, as trusted workflow code makes it:
// who acts comes from the workflow's code or input, and the model's
// arguments are passed apart, as they are. Keep what a Call holds
// deterministic: DBOS runs the workflow's code again when it recovers it,
// and the call must meet the same action.
type Call struct {
	// Principal is who acts: a tenant, a user (agenttool.WithScope).
	// Required.
	Principal string
	// Label names the principal for an operator (agenttool.WithLabel): a
	// display name, a ticket. Not part of the key.
	Label string
	// Args is the tool's input, as the model (or the code) wrote it: one
	// JSON object, or text for a tool built with TextInput.
	Args string
	// Session, under ByInput, is the conversation the model's calls belong
	// to; "" means the workflow's ID. Set it to the conversation's own ID,
	// carried in the workflow's input, for a conversation that outlives
	// one workflow (a fork, a next run). Refused under ByStep.
	Session string
	// Step, under ByStep, names the action within its workflow in place
	// of the step's ID: a later step of the workflow with the same Step
	// meets the same key (to call again after an answer that says wait,
	// or to learn how an unknown action was settled). "" means the step's
	// ID. Refused under ByInput.
	Step string
}

// check refuses a call that trusted code got wrong.
func (c Call) check(id Identity) error {
	bad := func(msg string) error { return fmt.Errorf("dbostool: %s: %w", msg, ErrInvalidCall) }
	switch {
	case c.Principal == "":
		return bad("the call has no Principal: say who acts, from the workflow's code or input, never from the model")
	case id == ByStep && c.Session != "":
		return bad("Session is for ByInput: under ByStep each action is its own session (name a later step's action the same with Step)")
	case id == ByInput && c.Step != "":
		return bad("Step is for ByStep: under ByInput the input's identifying fields name the action within the Session")
	}
	return nil
}

// scope returns the step's context with the call's trusted scope, label
// and, under ByStep, action id on it.
func scope(ctx context.Context, id Identity, c Call) (context.Context, error) {
	d, ok := ctx.(dbos.Context)
	if !ok {
		return nil, errors.New("dbostool: the step's context is not DBOS's: run the tool with Step.Run or Step.Go from a workflow")
	}
	wf, err := d.GetWorkflowID()
	if err != nil {
		return nil, fmt.Errorf("dbostool: %w", err)
	}
	switch id {
	case ByStep:
		step, err := d.GetStepID()
		if err != nil {
			return nil, fmt.Errorf("dbostool: %w", err)
		}
		action := actionID(wf, c.Step, step)
		ctx = agenttool.WithActionID(agenttool.WithScope(ctx, c.Principal, action), action)
	case ByInput:
		session := c.Session
		if session == "" {
			session = wf
		}
		ctx = agenttool.WithScope(ctx, c.Principal, session)
	}
	if c.Label != "" {
		ctx = agenttool.WithLabel(ctx, c.Label)
	}
	return ctx, nil
}

// actionID names a ByStep action: the workflow and the step's ID, or the
// call's Step. Quoting keeps any two names apart, whatever characters
// a workflow ID or a Step holds.
func actionID(workflow, action string, step int) string {
	if action != "" {
		return "dbos:" + strconv.Quote(workflow) + "@" + strconv.Quote(action)
	}
	return "dbos:" + strconv.Quote(workflow) + "#" + strconv.Itoa(step)
}
