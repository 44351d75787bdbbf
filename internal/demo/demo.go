// Package demo runs the example agents: flags, the model (scripted offline,
// or OpenAI-compatible), a real langchaingo executor or the example's own
// loop over openai-go (Example.Loop), the transcript and the -json
// summary. Each example supplies its tools, its destination and the
// script its offline model plays.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/tools"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/envelope"
)

// Fault is a fault an example can inject, named on the command line.
// Script is an example's offline model: it decides the next turn from the
// tool results read so far (the envelopes, in order), the way a real,
// imperfect model reacts to them.
type Script func(results []string) langchaintest.Turn

// Model returns the langchaingo model that plays s.
func (s Script) Model() *langchaintest.Model {
	return langchaintest.Func(func(results []string) (langchaintest.Turn, error) { return s(results), nil })
}

type Fault struct {
	Name, Help string
}

// Example describes one example agent.
type Example struct {
	Name   string
	Faults []Fault // the first is the default
	// Prompt is what the user asks the agent.
	Prompt string
	// Principal and Session are the trusted scope the application sets;
	// Label says, for operators, whose action each record is
	// (agenttool.WithLabel).
	Principal, Session, Label string
	// DefaultDB, if set, is the -db default (for an example whose point is
	// a second run); otherwise a temporary file is used and removed.
	DefaultDB string
	// Flags adds example-specific flags.
	Flags func(fs *flag.FlagSet)
	// Context, if set, adds to the trusted context of the run (an action id
	// from an orchestrator, say).
	Context func(ctx context.Context) context.Context
	// Setup starts the destination and builds the guarded tools.
	Setup func(ctx context.Context, env *Env) (*Scenario, error)
	// Script is the offline model's behaviour for a fault.
	Script func(fault string) Script
	// MaxIterations bounds the agent's turns; 0 means 8.
	MaxIterations int
	// Loop, if set, is the example's own agent loop over openai-go, which
	// replaces langchaingo's executor (see [Loop]). Offline, its client
	// talks to Script played over the Chat Completions wire format on
	// loopback.
	Loop Loop
}

// Env is what Setup gets.
type Env struct {
	Fault string
	DB    string    // the store's file
	Out   io.Writer // the transcript; io.Discard under -json
	// Flags are the parsed flags, with the example's own (Example.Flags);
	// nil when Setup is called without a command line (tests).
	Flags *flag.FlagSet
}

// Flag returns the value of the named flag, or "" if there is none.
func (e *Env) Flag(name string) string {
	if e.Flags == nil {
		return ""
	}
	if f := e.Flags.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// Scenario is a running example.
type Scenario struct {
	Tools   []*agenttool.Tool
	Effects func() int // effects counted at the destination
	Final   func(w io.Writer)
	// Serve, if set, runs after the agent has answered and the transcript
	// (or the summary) is written, and before Close: the email example
	// serves its console there until ctx ends or the program is
	// interrupted.
	Serve func(ctx context.Context) error
	Close func()
}

// Summary is the -json output.
type Summary struct {
	Example   string              `json:"example"`
	Fault     string              `json:"fault"`
	Effects   int                 `json:"effects"`
	Envelopes []envelope.Envelope `json:"envelopes"`
	// EffectsAfter counts the effects at the destination after each
	// envelope, for tests that check each envelope against them.
	EffectsAfter []int `json:"-"`
}

// Main runs ex with the process's arguments and environment, and exits.
func Main(ex Example) {
	_, err := Run(context.Background(), ex, os.Args[1:], os.Stdout, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ex.Name, err)
		os.Exit(1)
	}
}

// Run runs ex: the transcript (or, with -json, one line of JSON) goes to
// stdout.
func Run(ctx context.Context, ex Example, args []string, stdout io.Writer, getenv func(string) string) (Summary, error) {
	fs := flag.NewFlagSet(ex.Name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	llm := fs.String("llm", "scripted", "the model: scripted (offline) or openai (OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL)")
	fault := fs.String("fault", ex.Faults[0].Name, "the fault to inject (see below)")
	db := fs.String("db", ex.DefaultDB, "the store's bbolt file (default: a temporary file)")
	asJSON := fs.Bool("json", false, "print one line of JSON at the end instead of the transcript")
	if ex.Flags != nil {
		ex.Flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: go run ./examples/%s [flags]\n\nFlags:\n", ex.Name)
		fs.PrintDefaults()
		fmt.Fprintln(stdout, "\nFaults:")
		for _, f := range ex.Faults {
			fmt.Fprintf(stdout, "  %-14s %s\n", f.Name, f.Help)
		}
	}
	if err := fs.Parse(args); err != nil {
		return Summary{}, err
	}
	if !slices.ContainsFunc(ex.Faults, func(f Fault) bool { return f.Name == *fault }) {
		var names []string
		for _, f := range ex.Faults {
			names = append(names, f.Name)
		}
		return Summary{}, fmt.Errorf("unknown fault %q; choose one of %s", *fault, strings.Join(names, ", "))
	}
	var out io.Writer = &lockedWriter{w: stdout} // destinations log from their own goroutines
	if *asJSON {
		out = io.Discard
	}
	if *db == "" {
		dir, err := os.MkdirTemp("", "retrysafe-"+ex.Name)
		if err != nil {
			return Summary{}, err
		}
		defer os.RemoveAll(dir)
		*db = filepath.Join(dir, "retrysafe.db")
	}

	sc, err := ex.Setup(ctx, &Env{Fault: *fault, DB: *db, Out: out, Flags: fs})
	if err != nil {
		return Summary{}, err
	}
	defer sc.Close()

	sum := Summary{Example: ex.Name, Fault: *fault, Envelopes: []envelope.Envelope{}}
	turns := ex.MaxIterations
	if turns == 0 {
		turns = 8
	}
	fmt.Fprintf(out, "user  : %s\n", ex.Prompt)
	ctx = agenttool.WithScope(ctx, ex.Principal, ex.Session)
	if ex.Label != "" {
		ctx = agenttool.WithLabel(ctx, ex.Label)
	}
	if ex.Context != nil {
		ctx = ex.Context(ctx)
	}
	var answer string
	if ex.Loop != nil {
		answer, err = runLoop(ctx, ex, *llm, *fault, getenv, sc, out, &sum, turns)
	} else {
		answer, err = runExecutor(ctx, ex, *llm, *fault, getenv, sc, out, &sum, turns)
	}
	if err != nil {
		return Summary{}, fmt.Errorf("agent: %w", err)
	}
	fmt.Fprintf(out, "agent : %s\n", answer)
	sum.Effects = sc.Effects()
	if sc.Final != nil {
		sc.Final(out)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(sum); err != nil {
			return Summary{}, err
		}
	}
	if sc.Serve != nil {
		if err := sc.Serve(ctx); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// runExecutor runs the example with langchaingo's executor.
func runExecutor(ctx context.Context, ex Example, llm, fault string, getenv func(string) string, sc *Scenario, out io.Writer, sum *Summary, turns int) (string, error) {
	var model llms.Model
	switch llm {
	case "scripted":
		model = ex.Script(fault).Model()
	case "openai":
		var err error
		if model, err = openAIModel(getenv, sc.Tools); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("unknown -llm %q; choose scripted or openai", llm)
	}
	var agentTools []tools.Tool
	for _, t := range sc.Tools {
		agentTools = append(agentTools, &transcript{Tool: t, out: out, sum: sum, effects: sc.Effects})
	}
	executor := agents.NewExecutor(agents.NewOpenAIFunctionsAgent(model, agentTools), agents.WithMaxIterations(turns))
	return chains.Run(ctx, executor, ex.Prompt)
}

// transcript prints each call the model makes and each envelope it reads,
// and keeps the envelopes for the summary.
type transcript struct {
	*agenttool.Tool
	out     io.Writer
	sum     *Summary
	effects func() int
}

func (t *transcript) Call(ctx context.Context, input string) (string, error) {
	fmt.Fprintf(t.out, "model → %s %s\n", t.Name(), input)
	env := t.Invoke(ctx, input)
	t.sum.Envelopes = append(t.sum.Envelopes, env)
	t.sum.EffectsAfter = append(t.sum.EffectsAfter, t.effects())
	out := env.String()
	fmt.Fprintf(t.out, "tool  ← %s\n", out)
	return out, nil
}

// lockedWriter serialises writes from the agent and the destinations.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
