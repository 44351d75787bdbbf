package langchain

import (
	"context"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/tools"

	"github.com/retrysafe/retrysafe/agenttool"
)

// A guarded tool is a langchaingo tool, by its method set.
var _ tools.Tool = (*agenttool.Tool)(nil)

// FunctionDefinition describes a guarded tool for function-calling models:
// its name, its description (which tells the model how to read the
// envelope) and its real input schema.
func FunctionDefinition(t *agenttool.Tool) llms.FunctionDefinition {
	return llms.FunctionDefinition{Name: t.Name(), Description: t.Description(), Parameters: t.Schema()}
}

// WithToolSchemas returns a model that offers each guarded tool to the model
// with its real input schema ([FunctionDefinition]).
//
// langchaingo's functions agent declares every tool with one string
// parameter, so a function-calling model has to guess the tool's JSON; with
// the schemas it sends the object the tool expects. Use it around the model
// given to agents.NewOpenAIFunctionsAgent:
//
//	agent := agents.NewOpenAIFunctionsAgent(langchain.WithToolSchemas(model, send, book), []tools.Tool{send, book})
func WithToolSchemas(model llms.Model, guarded ...*agenttool.Tool) llms.Model {
	defs := make([]llms.FunctionDefinition, len(guarded))
	for i, t := range guarded {
		defs[i] = FunctionDefinition(t)
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
