// Command durable-agent: the booking agent as a durable workflow. Each
// turn of the model and each tool call is a step of a DBOS workflow on
// PostgreSQL (DATABASE_URL), or an activity of a Temporal workflow
// (-temporal host:port); the tool call is a guarded step
// (agenttool/dbostool) or activity (agenttool/temporaltool).
//
// The model's calls are keyed by their input within the conversation
// (ByInput): the model's "just to be sure" resend, a new step, meets the
// same action and is replayed. On DBOS, retrysafe's records live in the
// workflow's database, in a schema of their own, and once the agent has
// answered the workflow is started again under its ID, as a retried
// request would: DBOS answers with the recorded result, and nothing runs
// again.
//
//	DATABASE_URL=postgres://… go run ./examples/durable-agent         # DBOS; fault lost-response
//	DATABASE_URL=postgres://… go run ./examples/durable-agent -fault slow -json
//	temporal server start-dev &                                       # Temporal's development server
//	go run ./examples/durable-agent -temporal 127.0.0.1:7233
//	go run ./examples/durable-agent -h                                # flags and faults
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
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
		fs.StringVar(&temporalAddr, "temporal", "", "run on the Temporal server at this host:port (temporal server start-dev) instead of DBOS")
		fs.StringVar(&storeSchema, "store-schema", "retrysafe_durable_agent", "the schema of retrysafe's records in DATABASE_URL's database")
		fs.StringVar(&dbosSchema, "dbos-schema", "dbos", "the schema of DBOS's tables in DATABASE_URL's database")
	},
}

var temporalAddr, storeSchema, dbosSchema string

func main() { demo.Main(example) }

// noDatabase says how to get a PostgreSQL server.
const noDatabase = `this example runs on PostgreSQL: set DATABASE_URL, for example
  DATABASE_URL=postgres://postgres:secret@127.0.0.1:5432/postgres?sslmode=disable
A server for trying it out:
  docker run --rm -p 127.0.0.1:5432:5432 -e POSTGRES_PASSWORD=secret postgres:16
or, on Debian and Ubuntu: apt install postgresql, then as the postgres user
  psql -c "ALTER USER postgres PASSWORD 'secret'"
(or run it on Temporal instead: -temporal 127.0.0.1:7233)`

// setup starts the booking service and builds book_flight over it. On
// DBOS its records are in pgstore on DATABASE_URL (in their schema,
// -store-schema; DBOS keeps its tables in its own, -dbos-schema); on
// Temporal, in pgstore if DATABASE_URL is set and a bbolt file if not.
func setup(ctx context.Context, env *demo.Env) (*demo.Scenario, error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" && temporalAddr == "" {
		return nil, errors.New(noDatabase)
	}
	open := func(ctx context.Context) (agenttool.Store, func(), error) {
		if url == "" {
			store, err := boltstore.Open(env.DB, nil)
			if err != nil {
				return nil, nil, err
			}
			return store, func() { store.Close() }, nil
		}
		store, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: storeSchema})
		if err != nil {
			return nil, nil, err
		}
		return store, func() { store.Close() }, nil
	}
	return demo.SetupBookingWith(ctx, env, open, agenttool.Options{
		// A step run again after a crash waits out the dead process's
		// claim: a shorter lease than the default minute gets it going
		// sooner.
		Lease: 10 * time.Second,
	})
}

// conversation is the workflow's input: trusted code says who acts and in
// which conversation; the model's arguments never do.
type conversation struct {
	ID, Principal, Label, Prompt string
}

// message is one message of the conversation, as a workflow records it.
type message struct {
	Role    string // user, assistant or tool
	Content string
	Calls   []call // the assistant's
	CallID  string // the tool message's
}

// turn is what a model step records: the model's answer, or its calls.
type turn struct {
	Content string
	Calls   []call
}

type call struct {
	ID, Name, Arguments string
}

// model asks the model for its next turn after history.
func model(ctx context.Context, run *demo.LoopRun, box *openaitool.Toolbox, history []message) (turn, error) {
	var messages []openai.ChatCompletionMessageParamUnion
	for _, m := range history {
		switch m.Role {
		case "user":
			messages = append(messages, openai.UserMessage(m.Content))
		case "tool":
			messages = append(messages, openai.ToolMessage(m.Content, m.CallID))
		default:
			a := openai.ChatCompletionAssistantMessageParam{}
			for _, c := range m.Calls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Arguments}}})
			}
			messages = append(messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
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
}

// unknownTool answers a call of a tool the model was not offered.
func unknownTool(name string) envelope.Envelope {
	return envelope.Envelope{Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: name, Next: envelope.FixInput,
		Error: &envelope.Error{Code: "unknown_tool", Message: "there is no tool " + name + "; call book_flight"}}
}

// loop runs the agent on DBOS, or on Temporal with -temporal.
func loop(ctx context.Context, run *demo.LoopRun) (string, error) {
	b := make([]byte, 6)
	rand.Read(b)
	c := conversation{ID: "conversation-" + hex.EncodeToString(b), Principal: "tenant-42/user-7", Label: "Sam Diaz, trip to Lisbon", Prompt: run.Prompt}
	if temporalAddr != "" {
		return runTemporal(ctx, run, c)
	}
	return runDBOS(ctx, run, c)
}
