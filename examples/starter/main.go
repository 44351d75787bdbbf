// Command starter is the example to copy into your project: an agent with
// two guarded tools of different classes, a durable store, faults that
// show what retrysafe does, an offline scripted model for tests, and an
// operator who settles what is left.
//
//	go run ./examples/starter                 # offline: no keys, no network beyond 127.0.0.1
//	go run ./examples/starter -fault none     # nothing goes wrong
//	go run ./examples/starter -llm openai     # OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL
//
// The agent creates an invoice through an invoicing API (create_invoice,
// Keyed: the API honours the Idempotency-Key header) and tells #billing
// through a chat API (post_message, Reconcilable: the API can be searched
// by the client's message id). Both APIs run in this process on 127.0.0.1,
// and both lose their first response after doing the work. The files:
//
//	main.go        the program: store, tools, model, agent, transcript
//	tools.go       the guarded tools: what you write in your project
//	model.go       the offline model (agenttool/langchain/langchaintest) and the OpenAI one
//	operator.go    settling what is still unknown after the conversation
//	invoiceapi.go  the invoicing API (in your project: Stripe, your ERP)
//	chatapi.go     the chat API (in your project: Slack, Teams)
//
// It imports nothing from retrysafe's internal packages, so it builds
// outside this module too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/tools"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/langchain"
	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/envelope"
)

func main() {
	_, err := run(context.Background(), os.Args[1:], os.Stdout, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starter:", err)
		os.Exit(1)
	}
}

// report is what one run did, for the tests.
type report struct {
	Calls    []call    // every tool call, in order
	Answer   string    // the agent's final answer
	Settled  []settled // what the operator step did
	Invoices int       // invoices at the invoicing API
	Messages int       // messages at the chat API
}

// call is one tool call of the model and the envelope it read.
type call struct {
	Tool, Input string
	Envelope    envelope.Envelope
	// Invoices and Messages count the effects at the destinations right
	// after the call, to hold the envelope to the truth.
	Invoices, Messages int
}

// run runs the program with args, writing the transcript to stdout.
func run(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) (report, error) {
	fs := flag.NewFlagSet("starter", flag.ContinueOnError)
	fs.SetOutput(stdout)
	llm := fs.String("llm", "scripted", "the model: scripted (offline) or openai (OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL)")
	fault := fs.String("fault", "lost-responses", "lost-responses: both APIs do the work and lose their first response; none: nothing goes wrong")
	db := fs.String("db", "", "the store's bbolt file (default: a new file in a temporary directory, removed at the end)")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "Usage: go run ./examples/starter [flags]\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return report{}, err
	}
	if *fault != "lost-responses" && *fault != "none" {
		return report{}, fmt.Errorf("unknown -fault %q; choose lost-responses or none", *fault)
	}
	out := &lockedWriter{w: stdout} // the APIs log from their own goroutines
	logf := func(format string, args ...any) { fmt.Fprintf(out, "  "+format+"\n", args...) }

	// The destinations, on 127.0.0.1.
	invoices := startInvoiceAPI(*fault == "lost-responses", logf)
	defer invoices.close()
	chat := startChatAPI(*fault == "lost-responses", logf)
	defer chat.close()

	// A durable store: outcomes survive a crash and a restart.
	if *db == "" {
		dir, err := os.MkdirTemp("", "retrysafe-starter")
		if err != nil {
			return report{}, err
		}
		defer os.RemoveAll(dir)
		*db = filepath.Join(dir, "retrysafe.db")
	}
	store, err := boltstore.Open(*db, nil)
	if err != nil {
		return report{}, err
	}
	defer store.Close()

	guarded, err := newTools(store, invoices.url(), chat.url(), logf)
	if err != nil {
		return report{}, err
	}

	// The model: scripted offline, or a real one. Either way
	// langchain.WithToolSchemas shows it each tool's real input schema.
	var model llms.Model
	var script *langchaintest.Model
	switch *llm {
	case "scripted":
		script = scriptedModel()
		model = script
	case "openai":
		if model, err = openAIModel(getenv); err != nil {
			return report{}, err
		}
	default:
		return report{}, fmt.Errorf("unknown -llm %q; choose scripted or openai", *llm)
	}
	model = langchain.WithToolSchemas(model, guarded.createInvoice, guarded.postMessage)

	var rep report
	record := func(c call) {
		c.Invoices, c.Messages = invoices.count(), chat.count()
		rep.Calls = append(rep.Calls, c)
	}
	agentTools := []tools.Tool{
		&transcript{Tool: guarded.createInvoice, out: out, record: record},
		&transcript{Tool: guarded.postMessage, out: out, record: record},
	}
	executor := agents.NewExecutor(agents.NewOpenAIFunctionsAgent(model, agentTools), agents.WithMaxIterations(8))

	// Trusted application code, never the model, says who acts and in
	// which conversation: one conversation is one scope of actions.
	ctx = agenttool.WithScope(ctx, "tenant-42/user-7", "conversation-1")
	// The label tells an operator whose action a record is; it is not
	// part of the key.
	ctx = agenttool.WithLabel(ctx, "Ana Ruiz, billing")
	fmt.Fprintf(out, "user  : %s\n", prompt)
	if rep.Answer, err = chains.Run(ctx, executor, prompt); err != nil {
		return rep, fmt.Errorf("agent: %w", err)
	}
	fmt.Fprintf(out, "agent : %s\n", rep.Answer)
	if script != nil {
		if err := script.Err(); err != nil {
			return rep, err
		}
	}

	// Later: what is still unknown is settled by the operator.
	chat.catchUp()
	if rep.Settled, err = settle(ctx, out, store, guarded.createInvoice, guarded.postMessage); err != nil {
		return rep, err
	}

	rep.Invoices, rep.Messages = invoices.count(), chat.count()
	fmt.Fprintf(out, "invoices: %d, messages: %d\n", rep.Invoices, rep.Messages)
	return rep, nil
}

// transcript prints each call the model makes and each envelope it reads.
type transcript struct {
	*agenttool.Tool
	out    io.Writer
	record func(call)
}

// Call runs the guarded tool and returns its envelope's JSON, as the
// guarded tool's own Call does.
func (t *transcript) Call(ctx context.Context, input string) (string, error) {
	fmt.Fprintf(t.out, "model → %s %s\n", t.Name(), input)
	env := t.Invoke(ctx, input)
	t.record(call{Tool: t.Name(), Input: input, Envelope: env})
	fmt.Fprintf(t.out, "tool  ← %s\n", env)
	return env.String(), nil
}

// lockedWriter serialises the writes of the agent and the APIs.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
