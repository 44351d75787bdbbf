package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// FakeOpenAI speaks the chat-completions wire format with tool calls, for
// the tests of an example's -llm openai path: until it has read a tool
// result it asks for one call of Tool with Args, then it answers Answer in
// words. It accepts only /v1/chat/completions with the key "test-key", and
// keeps every request it was sent.
type FakeOpenAI struct {
	Tool, Args, Answer string

	mu       sync.Mutex
	requests []map[string]any
}

// Requests returns the requests it was sent, decoded, in order.
func (f *FakeOpenAI) Requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// ServeHTTP implements http.Handler.
func (f *FakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer test-key" {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	json.Unmarshal(body, &req)
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	toolResults := 0
	messages, _ := req["messages"].([]any)
	for _, m := range messages {
		if m, _ := m.(map[string]any); m["role"] == "tool" {
			toolResults++
		}
	}
	message := map[string]any{"role": "assistant", "content": f.Answer}
	finish := "stop"
	if toolResults == 0 {
		message = map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{
			"id": "call_1", "type": "function",
			"function": map[string]any{"name": f.Tool, "arguments": f.Args},
		}}}
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": req["model"],
		"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
}

// ScriptedOpenAI speaks the chat-completions wire format from a script of
// assistant turns: the n-th request is answered with the n-th turn's tool
// calls of Tool (several at once, as parallel tool calling sends them), an
// empty or missing turn in words. The answer to request SlowAt (from 0)
// waits Slow first: a model that thinks, a user slow to reply.
type ScriptedOpenAI struct {
	Tool   string
	Turns  [][]string // each turn: the arguments of its tool calls
	SlowAt int
	Slow   time.Duration

	mu sync.Mutex
	n  int
}

// ServeHTTP implements http.Handler.
func (f *ScriptedOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.ReadAll(r.Body)
	f.mu.Lock()
	turn := f.n
	f.n++
	f.mu.Unlock()
	if turn == f.SlowAt && f.Slow > 0 {
		time.Sleep(f.Slow)
	}
	message := map[string]any{"role": "assistant", "content": "Done."}
	finish := "stop"
	if turn < len(f.Turns) && len(f.Turns[turn]) > 0 {
		var calls []any
		for i, args := range f.Turns[turn] {
			calls = append(calls, map[string]any{"id": fmt.Sprintf("call_%d_%d", turn, i), "type": "function",
				"function": map[string]any{"name": f.Tool, "arguments": args}})
		}
		message = map[string]any{"role": "assistant", "content": "", "tool_calls": calls}
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-turns", "object": "chat.completion", "created": 1, "model": "test-model",
		"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
}
