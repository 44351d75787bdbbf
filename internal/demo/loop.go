package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/modeltest"
	"github.com/retrysafe/retrysafe/envelope"
)

// Loop is an example's own agent loop over openai-go, in place of
// langchaingo's executor: a plain Chat Completions loop, or a framework
// (Eino) whose model talks through openai-go. It returns the agent's
// final answer.
type Loop func(ctx context.Context, run *LoopRun) (answer string, err error)

// LoopRun is what a Loop gets.
type LoopRun struct {
	// Client talks to the model: the scripted one on loopback (-llm
	// scripted) or an OpenAI-compatible server (-llm openai).
	Client openai.Client
	Model  string
	// Tools are the scenario's guarded tools.
	Tools []*agenttool.Tool
	// Prompt is what the user asks.
	Prompt string
	// MaxTurns bounds the model's turns.
	MaxTurns int
	// Out is the transcript.
	Out io.Writer

	mu     sync.Mutex
	record func(tool, args string, env envelope.Envelope)
}

// Record prints one tool call and the envelope it got, and keeps the
// envelope for the -json summary. It is safe for concurrent use.
func (r *LoopRun) Record(tool, args string, env envelope.Envelope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(tool, args, env)
}

// runLoop runs ex.Loop for Run.
func runLoop(ctx context.Context, ex Example, llm, fault string, getenv func(string) string, sc *Scenario, out io.Writer, sum *Summary, turns int) (string, error) {
	run := &LoopRun{Tools: sc.Tools, Prompt: ex.Prompt, MaxTurns: turns, Out: out}
	run.record = func(tool, args string, env envelope.Envelope) {
		fmt.Fprintf(out, "model → %s %s\n", tool, args)
		sum.Envelopes = append(sum.Envelopes, env)
		sum.EffectsAfter = append(sum.EffectsAfter, sc.Effects())
		fmt.Fprintf(out, "tool  ← %s\n", env.String())
	}
	var (
		checkMu  sync.Mutex
		checkErr error // a failed Check of the script, from the server's goroutine
	)
	switch llm {
	case "scripted":
		script := ex.Script(fault)
		srv := modeltest.ChatCompletions(func(results []string) modeltest.Reply {
			t := script(results)
			checkMu.Lock()
			defer checkMu.Unlock()
			if t.Check != nil && checkErr == nil {
				var last string
				if len(results) > 0 {
					last = results[len(results)-1]
				}
				if err := t.Check(last); err != nil {
					checkErr = fmt.Errorf("the scripted model's check failed: %w", err)
				}
			}
			if t.Tool == "" {
				return modeltest.Final(t.Answer)
			}
			return modeltest.Calls(modeltest.Call{Name: t.Tool, Arguments: t.Args})
		})
		url, stop, err := srv.Start(ctx)
		if err != nil {
			return "", err
		}
		defer stop()
		run.Client = openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey(modeltest.Key), option.WithMaxRetries(0))
		run.Model = "scripted"
	case "openai":
		key := getenv("OPENAI_API_KEY")
		if key == "" {
			return "", errors.New("-llm openai needs OPENAI_API_KEY (and OPENAI_BASE_URL for an OpenAI-compatible server such as Ollama or vLLM)")
		}
		opts := []option.RequestOption{option.WithAPIKey(key)}
		if url := getenv("OPENAI_BASE_URL"); url != "" {
			opts = append(opts, option.WithBaseURL(url))
		}
		run.Client, run.Model = openai.NewClient(opts...), "gpt-4o-mini"
		if m := getenv("OPENAI_MODEL"); m != "" {
			run.Model = m
		}
	default:
		return "", fmt.Errorf("unknown -llm %q; choose scripted or openai", llm)
	}
	answer, err := ex.Loop(ctx, run)
	checkMu.Lock()
	defer checkMu.Unlock()
	if err == nil {
		err = checkErr
	}
	return answer, err
}
