package agenttool

import (
	"context"

	"github.com/tmc/langchaingo/llms"
)

// WithToolSchemas returns a model that offers each guarded tool to the model
// with its real input schema ([Tool.FunctionDefinition]).
//
// langchaingo's functions agent declares every tool with one string
// parameter, so a function-calling model has to guess the tool's JSON; with
// the schemas it sends the object the tool expects. Use it around the model
// given to agents.NewOpenAIFunctionsAgent:
//
//	agent := agents.NewOpenAIFunctionsAgent(agenttool.WithToolSchemas(model, send, book), []tools.Tool{send, book})
func WithToolSchemas(model llms.Model, tools ...*Tool) llms.Model {
	defs := make([]llms.FunctionDefinition, len(tools))
	for i, t := range tools {
		defs[i] = t.FunctionDefinition()
	}
	return &schemaModel{Model: model, defs: defs}
}

type schemaModel struct {
	llms.Model
	defs []llms.FunctionDefinition
}

// GenerateContent passes the call on with the tools' schemas, which replace
// the agent's one-string declarations.
func (m *schemaModel) GenerateContent(ctx context.Context, msgs []llms.MessageContent, opts ...llms.CallOption) (*llms.ContentResponse, error) {
	return m.Model.GenerateContent(ctx, msgs, append(opts, llms.WithFunctions(m.defs))...)
}

// Call implements llms.Model.
func (m *schemaModel) Call(ctx context.Context, prompt string, opts ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, m, prompt, opts...)
}
