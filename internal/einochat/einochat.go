// Package einochat is an Eino chat model (model.ToolCallingChatModel) over
// openai-go's Chat Completions client: for examples/eino-agent, with a
// real OpenAI-compatible server or the scripted one of package agenttool/modeltest,
// and for einotool's tests. It maps what a tool-calling loop needs (text,
// tool calls, tool results, tool definitions) and nothing more.
package einochat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"
)

// Model is a chat model with bound tools. It is safe for concurrent use.
type Model struct {
	client openai.Client
	model  string
	tools  []openai.ChatCompletionToolUnionParam
}

var _ model.ToolCallingChatModel = (*Model)(nil)

// New returns a model that asks client for completions by name.
func New(client openai.Client, name string) *Model { return &Model{client: client, model: name} }

// WithTools returns a copy of m that offers the tools.
func (m *Model) WithTools(tools []*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	out := *m
	out.tools = nil
	for _, t := range tools {
		var params shared.FunctionParameters
		if t.ParamsOneOf != nil {
			js, err := t.ParamsOneOf.ToJSONSchema()
			if err != nil {
				return nil, fmt.Errorf("einochat: tool %s: %w", t.Name, err)
			}
			b, err := json.Marshal(js)
			if err != nil {
				return nil, fmt.Errorf("einochat: tool %s: %w", t.Name, err)
			}
			if err := json.Unmarshal(b, &params); err != nil {
				return nil, fmt.Errorf("einochat: tool %s: %w", t.Name, err)
			}
		}
		out.tools = append(out.tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: t.Name, Description: param.NewOpt(t.Desc), Parameters: params,
		}))
	}
	return &out, nil
}

// Generate asks for the next message.
func (m *Model) Generate(ctx context.Context, input []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	params := openai.ChatCompletionNewParams{Model: m.model, Tools: m.tools}
	for _, msg := range input {
		switch msg.Role {
		case schema.System:
			params.Messages = append(params.Messages, openai.SystemMessage(msg.Content))
		case schema.User:
			params.Messages = append(params.Messages, openai.UserMessage(msg.Content))
		case schema.Tool:
			params.Messages = append(params.Messages, openai.ToolMessage(msg.Content, msg.ToolCallID))
		case schema.Assistant:
			var a openai.ChatCompletionAssistantMessageParam
			if msg.Content != "" {
				a.Content.OfString = param.NewOpt(msg.Content)
			}
			for _, c := range msg.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Function.Name, Arguments: c.Function.Arguments},
					},
				})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		default:
			return nil, fmt.Errorf("einochat: a message with role %q", msg.Role)
		}
	}
	completion, err := m.client.Chat.Completions.New(ctx, params)
	if err != nil {
		return nil, err
	}
	if len(completion.Choices) == 0 {
		return nil, errors.New("einochat: the completion has no choice")
	}
	got := completion.Choices[0].Message
	out := &schema.Message{Role: schema.Assistant, Content: got.Content}
	for i, c := range got.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, schema.ToolCall{Index: &i, ID: c.ID, Type: "function",
			Function: schema.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
	}
	return out, nil
}

// Stream answers with the whole message as one chunk.
func (m *Model) Stream(ctx context.Context, input []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	msg, err := m.Generate(ctx, input, opts...)
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray([]*schema.Message{msg}), nil
}
