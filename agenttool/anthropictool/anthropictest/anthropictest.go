// Package anthropictest is a scripted model for testing anthropic-sdk-go
// agent loops with guarded tools: anthropic-sdk-go's real client talks to
// it over loopback (the Messages API), so a test drives the same code the
// loop runs against the real API. It is to anthropictool what
// langchaintest is to langchaingo.
//
//	m := anthropictest.New(t,
//		modeltest.Calls(modeltest.Call{Name: "send_email", Arguments: `{"to":"ana@example.com"}`}),
//		modeltest.Final("Sent."))
//	msg, err := m.Client.Messages.New(ctx, params) // the loop under test
//	m.Results() // the tool_result blocks the loop sent back: envelopes
//
// A reply with several calls is one message of parallel tool_use blocks. A
// test fails when the model is asked more often than its script says, or
// is sent a request it cannot read. Safe for concurrent use.
package anthropictest

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/retrysafe/retrysafe/agenttool/modeltest"
)

// Model is a scripted Messages model and a client for it.
type Model struct {
	*modeltest.Server
	// Client is anthropic-sdk-go's client, pointed at the model, with no
	// retries.
	Client anthropic.Client
	// URL is the base URL, for a client of the test's own.
	URL string
}

// New serves a model that answers with replies in order, for the test t.
func New(t testing.TB, replies ...modeltest.Reply) *Model {
	t.Helper()
	return NewFunc(t, modeltest.Scripted(t, replies...))
}

// NewFunc serves a model whose script decides each reply from the tool
// results it has read, as a real model reacts to them.
func NewFunc(t testing.TB, script modeltest.Script) *Model {
	t.Helper()
	return modeltest.Tie(t, Start, script)
}

// Start serves a model with script on 127.0.0.1 until stop is called, for
// a program or an example that has no test to tie it to.
func Start(script modeltest.Script) (m *Model, stop func(), err error) {
	s := modeltest.Messages(script)
	url, stop, err := s.Start(context.Background())
	if err != nil {
		return nil, nil, err
	}
	return &Model{Server: s, URL: url,
		Client: anthropic.NewClient(option.WithBaseURL(url), option.WithAPIKey(modeltest.Key), option.WithMaxRetries(0))}, stop, nil
}
