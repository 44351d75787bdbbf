// Package scripted is an offline llms.Model for examples and tests. It plays
// a script like a real, imperfect model would: each turn it reads the tool
// results so far and answers with the next tool call or a final text.
package scripted

import (
	"context"
	"fmt"
	"sync"

	"github.com/tmc/langchaingo/llms"
)

// Call is a tool call the model makes.
type Call struct {
	Tool      string
	Arguments string // JSON, as a function-calling model sends it
}

// Reply is one turn of the model: a tool call, or a final answer when Call is
// nil.
type Reply struct {
	Call *Call
	Text string // the final answer, or words said along with the call
}

// Script decides the next turn from the tool results seen so far (the
// envelopes, in order).
type Script func(results []string) Reply

// Model is an llms.Model driven by a Script. It is safe for concurrent use,
// though one conversation at a time is what it is made for.
type Model struct {
	script Script
	mu     sync.Mutex
	calls  int
}

var _ llms.Model = (*Model)(nil)

// New returns a model that plays script.
func New(script Script) *Model { return &Model{script: script} }

// GenerateContent implements llms.Model.
func (m *Model) GenerateContent(ctx context.Context, messages []llms.MessageContent, _ ...llms.CallOption) (*llms.ContentResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var results []string
	for _, msg := range messages {
		for _, part := range msg.Parts {
			if r, ok := part.(llms.ToolCallResponse); ok {
				results = append(results, r.Content)
			}
		}
	}
	reply := m.script(results)
	m.mu.Lock()
	m.calls++
	id := fmt.Sprintf("call_%d", m.calls)
	m.mu.Unlock()
	choice := &llms.ContentChoice{Content: reply.Text, StopReason: "stop"}
	if reply.Call != nil {
		choice.StopReason = "tool_calls"
		choice.ToolCalls = []llms.ToolCall{{
			ID: id, Type: "function",
			FunctionCall: &llms.FunctionCall{Name: reply.Call.Tool, Arguments: reply.Call.Arguments},
		}}
	}
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{choice}}, nil
}

// Call implements llms.Model.
func (m *Model) Call(ctx context.Context, prompt string, options ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, m, prompt, options...)
}
