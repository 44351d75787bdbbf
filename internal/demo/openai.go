package demo

import (
	"errors"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/langchain"
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
	return langchain.WithToolSchemas(llm, guarded...), nil
}
