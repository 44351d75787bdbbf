// Command eino-agent: an Eino react agent books one seat through an HTTP
// booking API on loopback that honours Idempotency-Key, with retrysafe
// guarding the booking through agenttool/einotool.
//
// The guarded tool is an Eino InvokableTool with its real schema; the
// agent's ToolsNode runs a message's calls in the model's order and
// answers an unknown tool name instead of ending the run. The chat model
// is a small Eino model over openai-go (internal/einochat): offline it
// talks to a scripted model behind the Chat Completions wire format on
// loopback, with -llm openai to an OpenAI-compatible server.
//
//	go run ./examples/eino-agent                      # offline, fault lost-response
//	go run ./examples/eino-agent -fault unavailable -json
//	OPENAI_API_KEY=… go run ./examples/eino-agent -llm openai
//	go run ./examples/eino-agent -h                   # flags and faults
package main

import (
	"context"
	"strings"

	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/flow/agent/react"
	"github.com/cloudwego/eino/schema"

	"github.com/retrysafe/retrysafe/agenttool/einotool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
	"github.com/retrysafe/retrysafe/internal/einochat"
)

var example = demo.Example{
	Name:      "eino-agent",
	Faults:    demo.BookingFaults,
	Prompt:    "Book Ana Lima on TP1234 on 12 December.",
	Principal: "tenant-42/user-7",
	Session:   "conversation-12",
	Label:     "Sam Diaz, lunch planning",
	Setup:     demo.SetupBooking, // the booking service on loopback, and book_flight over it
	Script:    demo.BookFlight,
	Loop:      agent,
}

func main() { demo.Main(example) }

// agent runs a react agent with the guarded tools. The scope is already on
// ctx: agenttool.WithScope(ctx, "tenant-42/user-7", "conversation-12").
func agent(ctx context.Context, run *demo.LoopRun) (string, error) {
	tools, err := einotool.ToolsConfig(run.Tools...)
	if err != nil {
		return "", err
	}
	for i, t := range tools.Tools { // the transcript
		tools.Tools[i] = &transcript{InvokableTool: t.(tool.InvokableTool), run: run}
	}
	model := einochat.New(run.Client, run.Model)
	a, err := react.NewAgent(ctx, &react.AgentConfig{ToolCallingModel: model, ToolsConfig: tools, MaxStep: 2*run.MaxTurns + 1})
	if err != nil {
		return "", err
	}
	answer, err := a.Generate(ctx, []*schema.Message{schema.UserMessage(run.Prompt)})
	if err != nil {
		return "", err
	}
	return answer.Content, nil
}

// transcript records each call and the envelope it returned.
type transcript struct {
	tool.InvokableTool
	run *demo.LoopRun
}

func (t *transcript) InvokableRun(ctx context.Context, args string, opts ...tool.Option) (string, error) {
	out, err := t.InvokableTool.InvokableRun(ctx, args, opts...)
	info, _ := t.Info(ctx)
	env, _ := envelope.Parse([]byte(strings.TrimSpace(out)))
	t.run.Record(info.Name, args, env)
	return out, err
}
