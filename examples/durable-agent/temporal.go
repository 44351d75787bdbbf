package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool/openaitool"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// temporalAgent is the agent as a Temporal workflow: each turn of the
// model an activity ("model"), each tool call a guarded activity.
type temporalAgent struct {
	run  *demo.LoopRun
	box  *openaitool.Toolbox
	acts map[string]*temporaltool.Activity
}

// registry is what a worker, or the SDK's test environment, registers on.
type registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

func newTemporalAgent(run *demo.LoopRun, r registry) (*temporalAgent, error) {
	box, err := openaitool.New(run.Tools...)
	if err != nil {
		return nil, err
	}
	a := &temporalAgent{run: run, box: box, acts: map[string]*temporaltool.Activity{}}
	for _, t := range run.Tools {
		// The booking tool retries inside one activity (a lost response
		// is sent again at once under its reference); Temporal retries
		// the activity when an attempt did nothing.
		if a.acts[t.Name()], err = temporaltool.Register(r, t, &temporaltool.Options{ToolRetries: true}); err != nil {
			return nil, err
		}
	}
	r.RegisterActivityWithOptions(a.model, activity.RegisterOptions{Name: "model"})
	r.RegisterWorkflowWithOptions(a.workflow, workflow.RegisterOptions{Name: "agent"})
	return a, nil
}

func (a *temporalAgent) model(ctx context.Context, history []message) (turn, error) {
	return model(ctx, a.run, a.box, history)
}

// workflow is the agent loop; the model's calls are keyed by their input
// in the conversation (ByInput), so that a repeat in a later activity is
// the same action.
func (a *temporalAgent) workflow(ctx workflow.Context, c conversation) (string, error) {
	mctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	history := []message{{Role: "user", Content: c.Prompt}}
	for range a.run.MaxTurns {
		var t turn
		if err := workflow.ExecuteActivity(mctx, "model", history).Get(ctx, &t); err != nil {
			return "", err
		}
		if len(t.Calls) == 0 {
			return t.Content, nil
		}
		history = append(history, message{Role: "assistant", Calls: t.Calls})
		for _, tc := range t.Calls {
			env := unknownTool(tc.Name)
			if act, ok := a.acts[tc.Name]; ok {
				var err error
				env, err = temporaltool.Execute(ctx, act, temporaltool.Call{Principal: c.Principal, Label: c.Label, Session: c.ID,
					Args: tc.Arguments, Identity: temporaltool.ByInput})
				if err != nil {
					return "", err
				}
			}
			if !workflow.IsReplaying(ctx) {
				a.run.Record(tc.Name, tc.Arguments, env)
			}
			history = append(history, message{Role: "tool", Content: env.String(), CallID: tc.ID})
		}
	}
	return "", errors.New("the model did not finish within the turns allowed")
}

// runTemporal runs the agent on the Temporal server at temporalAddr, with
// a worker in this process.
var runTemporal = func(ctx context.Context, run *demo.LoopRun, c conversation) (string, error) {
	quiet := log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	cl, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: quiet})
	if err != nil {
		return "", err
	}
	defer cl.Close()
	const queue = "durable-agent"
	w := worker.New(cl, queue, worker.Options{})
	if _, err := newTemporalAgent(run, w); err != nil {
		return "", err
	}
	if err := w.Start(); err != nil {
		return "", err
	}
	defer w.Stop()
	wr, err := cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "durable-agent-" + c.ID, TaskQueue: queue}, "agent", c)
	if err != nil {
		return "", err
	}
	var answer string
	err = wr.Get(ctx, &answer)
	return answer, err
}
