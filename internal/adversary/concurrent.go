package adversary

import (
	"context"
	"errors"

	"github.com/openai/openai-go/v3"

	"github.com/retrysafe/retrysafe/agenttool/openaitool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// ConcurrentLoop is a plain openai-go Chat Completions loop, as the
// openai-agent example's, that runs the calls of each message all at once
// (openaitool's Toolbox.RunConcurrently), as a user may choose to. Set as
// an example's Loop, it drives that example's guarded tools with every
// message's calls racing each other.
func ConcurrentLoop(ctx context.Context, run *demo.LoopRun) (string, error) {
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
		results := box.RunConcurrently(ctx, msg)
		params.Messages = append(params.Messages, results...)
		for i, c := range msg.ToolCalls {
			env, _ := envelope.Parse([]byte(results[i].OfTool.Content.OfString.Value))
			run.Record(c.Function.Name, c.Function.Arguments, env)
		}
	}
	return "", errors.New("the model did not finish within the turns allowed")
}
