// Package einotest is a scripted model for testing Eino agents with
// guarded tools: a model.ToolCallingChatModel backed by openai-go's real
// client talking to a scripted Chat Completions server over loopback, so
// that a react agent, a ToolsNode or an adk.ChatModelAgent runs as it does
// against an OpenAI-compatible API. (Eino's model is an interface, and a
// scripted one in the process would be the honest equivalent; going
// through a client and its wire format also checks what the tools'
// schemas and answers look like there.) It is to einotool what
// langchaintest is to langchaingo.
//
//	m := einotest.New(t,
//		modeltest.Calls(modeltest.Call{Name: "send_email", Arguments: `{"to":"ana@example.com"}`}),
//		modeltest.Final("Sent."))
//	agent, err := react.NewAgent(ctx, &react.AgentConfig{ToolCallingModel: m.ChatModel, ToolsConfig: tools})
//	m.Results() // the tool results the agent sent back: envelopes
//
// A test fails when the model is asked more often than its script says.
// Safe for concurrent use.
package einotest

import (
	"testing"

	"github.com/cloudwego/eino/components/model"

	"github.com/retrysafe/retrysafe/agenttool/modeltest"
	"github.com/retrysafe/retrysafe/agenttool/openaitool/openaitest"
	"github.com/retrysafe/retrysafe/internal/einochat"
)

// Model is a scripted model for Eino.
type Model struct {
	*modeltest.Server
	// ChatModel is the model to give an Eino agent.
	ChatModel model.ToolCallingChatModel
}

// New serves a model that answers with replies in order, for the test t.
func New(t testing.TB, replies ...modeltest.Reply) *Model {
	t.Helper()
	return NewFunc(t, modeltest.Scripted(t, replies...))
}

// NewFunc serves a model whose script decides each reply from the tool
// results it has read.
func NewFunc(t testing.TB, script modeltest.Script) *Model {
	t.Helper()
	return modeltest.Tie(t, Start, script)
}

// Start serves a model with script until stop is called, for a program or
// an example that has no test to tie it to.
func Start(script modeltest.Script) (m *Model, stop func(), err error) {
	o, stop, err := openaitest.Start(script)
	if err != nil {
		return nil, nil, err
	}
	return &Model{Server: o.Server, ChatModel: einochat.New(o.Client, "test-model")}, stop, nil
}
