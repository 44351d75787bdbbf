// Package modeltest is a scripted model behind the real wire formats of the
// model APIs: OpenAI's Chat Completions and Anthropic's Messages. The real
// SDK clients talk to it over loopback, so tests and the offline examples
// drive the same code a user's loop runs against the real API.
//
// A Script decides each reply from the tool results the model has read so
// far, the way a real, imperfect model reacts to them.
package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
)

// Call is one tool call the model makes.
type Call struct {
	Name string
	// Arguments are sent as they are: usually a JSON object, but a
	// careless model's text too. In the Messages format, where the input
	// is a JSON value, arguments that are not JSON are sent as a string.
	Arguments string
}

// Reply is the model's next message: tool calls (several in one message,
// as parallel tool calls), or, without calls, the final text.
type Reply struct {
	Calls []Call
	Text  string
}

// Final returns a reply that ends the conversation with text.
func Final(text string) Reply { return Reply{Text: text} }

// Calls returns a reply with the given calls, in order.
func Calls(calls ...Call) Reply { return Reply{Calls: calls} }

// Script decides the next reply from the tool results read so far (the
// content of every tool message, or tool_result block, of the request, in
// order). It is called once per request, from the server's goroutines, one
// at a time.
type Script func(results []string) Reply

// Server is a scripted model speaking one wire format. It accepts the key
// "test-key" only, and keeps every request it was sent. A Server is safe
// for concurrent use.
type Server struct {
	script Script
	format format

	mu       sync.Mutex
	requests []map[string]any
	calls    int // call ids handed out
}

type format int

const (
	chatCompletions format = iota
	messages
)

// ChatCompletions returns a server that speaks OpenAI's Chat Completions
// (POST /v1/chat/completions; base URL: the server's URL + "/v1").
func ChatCompletions(s Script) *Server { return &Server{script: s, format: chatCompletions} }

// Messages returns a server that speaks Anthropic's Messages API
// (POST /v1/messages; base URL: the server's URL).
func Messages(s Script) *Server { return &Server{script: s, format: messages} }

// Key is the API key the servers accept.
const Key = "test-key"

// Requests returns the requests it was sent, decoded, in order.
func (s *Server) Requests() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Start serves s on a free port of 127.0.0.1 until ctx ends or stop is
// called, and returns its URL.
func (s *Server) Start(ctx context.Context) (url string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("modeltest: %w", err)
	}
	srv := &http.Server{Handler: s}
	go srv.Serve(l)
	ctx, cancel := context.WithCancel(ctx)
	go func() { <-ctx.Done(); srv.Close() }()
	return "http://" + l.Addr().String(), cancel, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, auth := "/v1/chat/completions", r.Header.Get("Authorization") == "Bearer "+Key
	if s.format == messages {
		path, auth = "/v1/messages", auth || r.Header.Get("X-Api-Key") == Key
	}
	if r.Method != http.MethodPost || r.URL.Path != path || !auth {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"type":"error","error":{"type":"not_found_error","message":"not found"}}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"error":{"message":"the request is not JSON"}}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	reply := s.script(results(req, s.format))
	var out any
	if s.format == messages {
		out = s.messagesReply(req, reply)
	} else {
		out = s.chatReply(req, reply)
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(out)
}

// results reads the tool results of a request, in order.
func results(req map[string]any, f format) []string {
	var out []string
	msgs, _ := req["messages"].([]any)
	for _, m := range msgs {
		m, _ := m.(map[string]any)
		switch {
		case f == chatCompletions && m["role"] == "tool":
			out = append(out, text(m["content"]))
		case f == messages && m["role"] == "user":
			blocks, _ := m["content"].([]any)
			for _, b := range blocks {
				if b, _ := b.(map[string]any); b["type"] == "tool_result" {
					out = append(out, text(b["content"]))
				}
			}
		}
	}
	return out
}

// text reads content given as a string or as a list of text parts.
func text(c any) string {
	switch c := c.(type) {
	case string:
		return c
	case []any:
		var s string
		for _, p := range c {
			if p, _ := p.(map[string]any); p["type"] == "text" {
				t, _ := p["text"].(string)
				s += t
			}
		}
		return s
	}
	return ""
}

func (s *Server) nextID(prefix string) string {
	s.calls++
	return fmt.Sprintf("%s%d", prefix, s.calls)
}

func (s *Server) chatReply(req map[string]any, r Reply) any {
	message := map[string]any{"role": "assistant", "content": r.Text, "refusal": nil}
	finish := "stop"
	if len(r.Calls) > 0 {
		var calls []any
		for _, c := range r.Calls {
			calls = append(calls, map[string]any{"id": s.nextID("call_"), "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		message = map[string]any{"role": "assistant", "content": nil, "refusal": nil, "tool_calls": calls}
		finish = "tool_calls"
	}
	return map[string]any{
		"id": "chatcmpl-" + fmt.Sprint(len(s.requests)), "object": "chat.completion", "created": 1, "model": req["model"],
		"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": finish, "logprobs": nil}},
		"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	}
}

func (s *Server) messagesReply(req map[string]any, r Reply) any {
	content := []any{}
	stop := "end_turn"
	if r.Text != "" || len(r.Calls) == 0 {
		content = append(content, map[string]any{"type": "text", "text": r.Text})
	}
	for _, c := range r.Calls {
		input := json.RawMessage(c.Arguments)
		if !json.Valid(input) {
			input, _ = json.Marshal(c.Arguments)
		}
		content = append(content, map[string]any{"type": "tool_use", "id": s.nextID("toolu_"), "name": c.Name, "input": input})
		stop = "tool_use"
	}
	return map[string]any{
		"id": "msg_" + fmt.Sprint(len(s.requests)), "type": "message", "role": "assistant", "model": req["model"],
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 1, "output_tokens": 1},
	}
}

// Scripted returns a Script that answers with replies, one per request, in
// order, and fails t (if not nil) when the model is asked once more than
// replies, answering with a final text that says so.
func Scripted(t testing.TB, replies ...Reply) Script {
	n := 0
	return func([]string) Reply {
		if n >= len(replies) {
			if t != nil {
				t.Errorf("modeltest: the model was asked %d times; its script has %d replies", n+1, len(replies))
			}
			n++
			return Final("The script ran out.")
		}
		n++
		return replies[n-1]
	}
}

// Serve starts s for the test t (on 127.0.0.1, stopped when t ends) and
// returns its URL.
func Serve(t testing.TB, s *Server) string {
	t.Helper()
	url, stop, err := s.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// Results returns the tool results of the last request the model was
// sent, in order: the envelopes the loop answered its tool calls with.
func (s *Server) Results() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		return nil
	}
	return results(s.requests[len(s.requests)-1], s.format)
}

// Tie starts a model with start (an adapter test package's Start) for the
// test t, with script, and stops it when t ends.
func Tie[M any](t testing.TB, start func(Script) (M, func(), error), script Script) M {
	t.Helper()
	m, stop, err := start(script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return m
}
