package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/retrysafe/retrysafe/agenttool/dbostool"
	"github.com/retrysafe/retrysafe/agenttool/openaitool"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// runDBOS runs the agent as a DBOS workflow and waits for its answer.
func runDBOS(ctx context.Context, run *demo.LoopRun, c conversation) (string, error) {
	box, err := openaitool.New(run.Tools...) // the tools' definitions, as the model sees them
	if err != nil {
		return "", err
	}
	steps := map[string]*dbostool.Step{}
	for _, t := range run.Tools {
		// ByInput: the model proposes the calls, and one it repeats in a
		// later step must meet the same action.
		if steps[t.Name()], err = dbostool.New(t, &dbostool.Options{Identity: dbostool.ByInput}); err != nil {
			return "", err
		}
	}
	agent := func(ctx dbos.Context, c conversation) (string, error) {
		history := []message{{Role: "user", Content: c.Prompt}}
		for range run.MaxTurns {
			t, err := dbos.RunAsStep(ctx, func(ctx context.Context) (turn, error) { return model(ctx, run, box, history) }, dbos.WithStepName("model"))
			if err != nil {
				return "", err
			}
			if len(t.Calls) == 0 {
				return t.Content, nil
			}
			history = append(history, message{Role: "assistant", Calls: t.Calls})
			for _, tc := range t.Calls {
				env := unknownTool(tc.Name)
				if step, ok := steps[tc.Name]; ok {
					if env, err = step.Run(ctx, dbostool.Call{Principal: c.Principal, Label: c.Label, Session: c.ID, Args: tc.Arguments}); err != nil {
						return "", err
					}
				}
				run.Record(tc.Name, tc.Arguments, env)
				history = append(history, message{Role: "tool", Content: env.String(), CallID: tc.ID})
			}
		}
		return "", errors.New("the model did not finish within the turns allowed")
	}

	dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "durable-agent", DatabaseURL: os.Getenv("DATABASE_URL"), DatabaseSchema: dbosSchema,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return "", err
	}
	dbos.RegisterWorkflow(dctx, agent, dbos.WithWorkflowName("agent"))
	if err := dbos.Launch(dctx); err != nil {
		return "", err
	}
	defer dbos.Shutdown(dctx, 5*time.Second)

	id := "durable-agent-" + c.ID
	h, err := dbos.RunWorkflow(dctx, agent, c, dbos.WithWorkflowID(id))
	if err != nil {
		return "", err
	}
	answer, err := h.GetResult()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(run.Out, "workflow %s done; started again under its ID:\n", id)
	again, err := dbos.RunWorkflow(dctx, agent, c, dbos.WithWorkflowID(id))
	if err != nil {
		return "", err
	}
	if replay, err := again.GetResult(); err != nil || replay != answer {
		return "", fmt.Errorf("the workflow started again answered %q (%v), not its recorded answer", replay, err)
	}
	fmt.Fprintf(run.Out, "  DBOS answered with the recorded result; no step ran\n")
	return answer, nil
}
