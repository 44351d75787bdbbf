// Command openai-agent: a plain openai-go Chat Completions loop books one
// seat through an HTTP booking API on loopback that honours
// Idempotency-Key, with retrysafe guarding the booking through
// agenttool/openaitool.
//
// The loop is the one Go developers write by hand; openaitool offers the
// guarded tools with their real schemas and answers every tool call of an
// assistant message with its envelope. Offline, the model is a scripted
// one behind the Chat Completions wire format on loopback, so the real
// openai-go client is what talks to it.
//
//	go run ./examples/openai-agent                      # offline, fault lost-response
//	go run ./examples/openai-agent -fault slow -json
//	OPENAI_API_KEY=… go run ./examples/openai-agent -llm openai
//	go run ./examples/openai-agent -h                   # flags and faults
package main

import (
	"context"
	"errors"

	"github.com/openai/openai-go/v3"

	"github.com/retrysafe/retrysafe/agenttool/openaitool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

var example = demo.Example{
	Name:      "openai-agent",
	Faults:    demo.BookingFaults,
	Prompt:    "Book Ana Lima on TP1234 on 12 December.",
	Principal: "tenant-42/user-7",
	Session:   "conversation-12",
	Label:     "Sam Diaz, lunch planning",
	Setup:     demo.SetupBooking, // the booking service on loopback, and book_flight over it
	Script:    demo.BookFlight,
	Loop:      loop,
}

func main() { demo.Main(example) }

// loop is a user's Chat Completions loop. The scope is already on ctx:
// agenttool.WithScope(ctx, "tenant-42/user-7", "conversation-12").
func loop(ctx context.Context, run *demo.LoopRun) (string, error) {
	box, err := openaitool.New(run.Tools...)
	if err != nil {
		return "", err
	}
	params := openai.ChatCompletionNewParams{
		Model:    run.Model,
		Tools:    box.Definitions(),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(run.Prompt)},
	}
	for range run.MaxTurns {
		completion, err := run.Client.Chat.Completions.New(ctx, params)
		if err != nil {
			return "", err
		}
		if len(completion.Choices) == 0 {
			return "", errors.New("the model answered with no choice")
		}
		msg := completion.Choices[0].Message
		params.Messages = append(params.Messages, msg.ToParam())
		if len(msg.ToolCalls) == 0 {
			return msg.Content, nil
		}
		results := box.Run(ctx, msg) // one tool message per call, the envelope as its content
		params.Messages = append(params.Messages, results...)

		for i, c := range msg.ToolCalls { // the transcript
			env, _ := envelope.Parse([]byte(results[i].OfTool.Content.OfString.Value))
			run.Record(c.Function.Name, c.Function.Arguments, env)
		}
	}
	return "", errors.New("the model did not finish within the turns allowed")
}
