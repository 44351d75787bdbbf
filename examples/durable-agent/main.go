// Command durable-agent: the booking agent as a durable workflow. Each
// turn of the model and each tool call is a step of a DBOS workflow on
// PostgreSQL (DATABASE_URL); the tool call is a guarded step
// (agenttool/dbostool), and retrysafe's records live in the same
// database, in a schema of their own.
//
// The model's calls are keyed by their input within the conversation
// (dbostool.ByInput): the model's "just to be sure" resend, a new step,
// meets the same action and is replayed. Once the agent has answered, the
// workflow is started again under its ID, as a retried request would:
// DBOS answers with the recorded result, and nothing runs again.
//
//	DATABASE_URL=postgres://… go run ./examples/durable-agent         # fault lost-response
//	DATABASE_URL=postgres://… go run ./examples/durable-agent -fault slow -json
//	go run ./examples/durable-agent -h                                # flags and faults
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/openai/openai-go/v3"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/dbostool"
	"github.com/retrysafe/retrysafe/agenttool/openaitool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

var example = demo.Example{
	Name:      "durable-agent",
	Faults:    demo.BookingFaults,
	Prompt:    "Book Ana Lima on TP1234 on 12 December.",
	Principal: "tenant-42/user-7",
	Label:     "Sam Diaz, trip to Lisbon",
	Setup:     setup,
	Script:    demo.BookFlight,
	Loop:      loop,
	Flags: func(fs *flag.FlagSet) {
		fs.StringVar(&storeSchema, "store-schema", "retrysafe_durable_agent", "the schema of retrysafe's records in DATABASE_URL's database")
		fs.StringVar(&dbosSchema, "dbos-schema", "dbos", "the schema of DBOS's tables in DATABASE_URL's database")
	},
}

var storeSchema, dbosSchema string

func main() { demo.Main(example) }

// noDatabase says how to get a PostgreSQL server.
const noDatabase = `this example runs on PostgreSQL: set DATABASE_URL, for example
  DATABASE_URL=postgres://postgres:secret@127.0.0.1:5432/postgres?sslmode=disable
A server for trying it out:
  docker run --rm -p 127.0.0.1:5432:5432 -e POSTGRES_PASSWORD=secret postgres:16
or, on Debian and Ubuntu: apt install postgresql, then as the postgres user
  psql -c "ALTER USER postgres PASSWORD 'secret'"`

// setup starts the booking service and builds book_flight over it, its
// records in pgstore on DATABASE_URL (in their schema, -store-schema; DBOS
// keeps its tables in its own, -dbos-schema).
func setup(ctx context.Context, env *demo.Env) (*demo.Scenario, error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return nil, errors.New(noDatabase)
	}
	return demo.SetupBookingWith(ctx, env, func(ctx context.Context) (agenttool.Store, func(), error) {
		store, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: storeSchema})
		if err != nil {
			return nil, nil, err
		}
		return store, func() { store.Close() }, nil
	}, agenttool.Options{
		// A step DBOS runs again after a crash outwaits the dead
		// process's lease (dbostool.ErrRecoveryWindow).
		Lease:       10 * time.Second,
		WaitTimeout: 15 * time.Second,
	})
}

// conversation is the workflow's input: trusted code says who acts and in
// which conversation; the model's arguments never do.
type conversation struct {
	ID, Principal, Label, Prompt string
}

// turn is what a model step records: the model's answer, or its calls.
type turn struct {
	Content string
	Calls   []call
}

type call struct {
	ID, Name, Arguments string
}

// loop runs the agent as a DBOS workflow and waits for its answer.
func loop(ctx context.Context, run *demo.LoopRun) (string, error) {
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
		messages := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(c.Prompt)}
		for range run.MaxTurns {
			t, err := dbos.RunAsStep(ctx, func(ctx context.Context) (turn, error) {
				completion, err := run.Client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: run.Model, Tools: box.Definitions(), Messages: messages})
				if err != nil {
					return turn{}, err
				}
				if len(completion.Choices) == 0 {
					return turn{}, errors.New("the model answered with no choice")
				}
				msg := completion.Choices[0].Message
				t := turn{Content: msg.Content}
				for _, tc := range msg.ToolCalls {
					t.Calls = append(t.Calls, call{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
				}
				return t, nil
			}, dbos.WithStepName("model"))
			if err != nil {
				return "", err
			}
			if len(t.Calls) == 0 {
				return t.Content, nil
			}
			assistant := openai.ChatCompletionAssistantMessageParam{}
			for _, tc := range t.Calls {
				assistant.ToolCalls = append(assistant.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments}}})
			}
			messages = append(messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &assistant})
			for _, tc := range t.Calls {
				var env envelope.Envelope
				if step, ok := steps[tc.Name]; ok {
					env, err = step.Run(ctx, dbostool.Call{Principal: c.Principal, Label: c.Label, Session: c.ID, Input: tc.Arguments})
					if err != nil {
						return "", err
					}
				} else {
					env = envelope.Envelope{Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: tc.Name, Next: envelope.FixInput,
						Error: &envelope.Error{Code: "unknown_tool", Message: "there is no tool " + tc.Name + "; call book_flight"}}
				}
				run.Record(tc.Name, tc.Arguments, env)
				messages = append(messages, openai.ToolMessage(env.String(), tc.ID))
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

	b := make([]byte, 6)
	rand.Read(b)
	c := conversation{ID: "conversation-" + hex.EncodeToString(b), Principal: "tenant-42/user-7", Label: "Sam Diaz, trip to Lisbon", Prompt: run.Prompt}
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
