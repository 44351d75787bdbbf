package langchain_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tmc/langchaingo/llms"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/langchain"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
)

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func newSend(t *testing.T) *agenttool.Tool {
	t.Helper()
	send, err := agenttool.New("send_email", "Send an email.", func(context.Context, email) (string, error) { return "sent", nil },
		agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	if err != nil {
		t.Fatal(err)
	}
	return send
}

// optionsModel records the call options it is given.
type optionsModel struct{ got llms.CallOptions }

func (m *optionsModel) GenerateContent(_ context.Context, _ []llms.MessageContent, opts ...llms.CallOption) (*llms.ContentResponse, error) {
	for _, o := range opts {
		o(&m.got)
	}
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{{Content: "ok"}}}, nil
}

func (m *optionsModel) Call(ctx context.Context, prompt string, opts ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, m, prompt, opts...)
}

func TestWithToolSchemas(t *testing.T) {
	send := newSend(t)
	inner := &optionsModel{}
	model := langchain.WithToolSchemas(inner, send)
	// The agent passes its one-string declaration; the tool's schema wins.
	oneString := []llms.FunctionDefinition{{Name: "send_email", Parameters: map[string]any{"properties": map[string]any{"__arg1": map[string]string{"type": "string"}}}}}
	if _, err := model.GenerateContent(context.Background(), nil, llms.WithFunctions(oneString)); err != nil {
		t.Fatal(err)
	}
	if len(inner.got.Functions) != 1 || !strings.Contains(string(send.Schema()), `"subject"`) ||
		string(inner.got.Functions[0].Parameters.(json.RawMessage)) != string(send.Schema()) {
		t.Errorf("functions given to the model: %+v", inner.got.Functions)
	}
}

func TestFunctionDefinition(t *testing.T) {
	send := newSend(t)
	fd := langchain.FunctionDefinition(send)
	if fd.Name != "send_email" || !strings.Contains(fd.Description, "envelope") || string(fd.Parameters.(json.RawMessage)) != string(send.Schema()) {
		t.Errorf("function definition %+v", fd)
	}
}
