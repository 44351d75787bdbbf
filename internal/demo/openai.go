package demo

import (
	"context"
	"errors"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"

	"github.com/retrysafe/retrysafe/agenttool"
)

// openAIModel is langchaingo's OpenAI client, configured from the
// environment, so that any OpenAI-compatible server (Ollama, vLLM) works.
func openAIModel(getenv func(string) string, guarded []*agenttool.Tool) (llms.Model, error) {
	key := getenv("OPENAI_API_KEY")
	if key == "" {
		return nil, errors.New("-llm openai needs OPENAI_API_KEY (and OPENAI_BASE_URL for an OpenAI-compatible server such as Ollama or vLLM)")
	}
	opts := []openai.Option{openai.WithToken(key), openai.WithModel("gpt-4o-mini")}
	if url := getenv("OPENAI_BASE_URL"); url != "" {
		opts = append(opts, openai.WithBaseURL(url))
	}
	if m := getenv("OPENAI_MODEL"); m != "" {
		opts = append(opts, openai.WithModel(m))
	}
	llm, err := openai.New(opts...)
	if err != nil {
		return nil, err
	}
	var defs []llms.FunctionDefinition
	for _, t := range guarded {
		defs = append(defs, t.FunctionDefinition())
	}
	return &withSchemas{Model: llm, defs: defs}, nil
}

// withSchemas gives the model each tool's real input schema. langchaingo's
// functions agent declares every tool with one string parameter; with the
// schema the model sends the JSON object the tool expects.
type withSchemas struct {
	llms.Model
	defs []llms.FunctionDefinition
}

func (m *withSchemas) GenerateContent(ctx context.Context, msgs []llms.MessageContent, opts ...llms.CallOption) (*llms.ContentResponse, error) {
	return m.Model.GenerateContent(ctx, msgs, append(opts, llms.WithFunctions(m.defs))...)
}
