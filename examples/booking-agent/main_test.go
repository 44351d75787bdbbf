package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

func TestFaults(t *testing.T) {
	for _, f := range example.Faults {
		t.Run(f.Name, func(t *testing.T) {
			var out bytes.Buffer
			sum, err := demo.Run(context.Background(), example, []string{"-fault", f.Name}, &out, os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Effects != 1 || len(sum.Envelopes) != 2 {
				t.Fatalf("effects %d, %d envelopes; want 1 booking, 2 envelopes\n%s", sum.Effects, len(sum.Envelopes), out.String())
			}
			first, second := sum.Envelopes[0], sum.Envelopes[1]
			if first.Status != envelope.Success || first.Replayed || second.Status != envelope.Success || !second.Replayed {
				t.Errorf("envelopes %s then %s; want a success, then the same replayed", first, second)
			}
			minAttempts := map[string]int{"none": 1, "lost-response": 2, "unavailable": 3, "slow": 2}[f.Name]
			if first.Attempts < minAttempts {
				t.Errorf("fault %s took %d attempts, want at least %d", f.Name, first.Attempts, minAttempts)
			}
			if !strings.HasSuffix(out.String(), "bookings: 1\n") {
				t.Errorf("transcript does not end with the booking count:\n%s", out.String())
			}
		})
	}
}

// fakeOpenAI speaks the chat-completions wire format with tool calls: it
// asks for book_flight once, then answers in words.
type fakeOpenAI struct {
	mu       sync.Mutex
	requests []map[string]any
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	for _, m := range req["messages"].([]any) {
		if m.(map[string]any)["role"] == "tool" {
			toolResults++
		}
	}
	message := map[string]any{"role": "assistant", "content": "Ana Lima is booked."}
	finish := "stop"
	if toolResults == 0 {
		message = map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{
			"id": "call_1", "type": "function",
			"function": map[string]any{"name": "book_flight", "arguments": `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`},
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

func TestOpenAIPath(t *testing.T) {
	fake := &fakeOpenAI{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	env := map[string]string{"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_MODEL": "test-model"}
	var out bytes.Buffer
	sum, err := demo.Run(context.Background(), example, []string{"-llm", "openai", "-fault", "lost-response", "-json"}, &out,
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if sum.Effects != 1 || len(sum.Envelopes) != 1 || sum.Envelopes[0].Status != envelope.Success || sum.Envelopes[0].Attempts != 2 {
		t.Fatalf("through the OpenAI path: %+v", sum)
	}
	if len(fake.requests) != 2 || fake.requests[0]["model"] != "test-model" {
		t.Fatalf("the fake server saw %d requests: %v", len(fake.requests), fake.requests)
	}
	// The model was given the tool's real input schema, not one string.
	tools, _ := json.Marshal(fake.requests[0]["tools"])
	if !strings.Contains(string(tools), `"passenger"`) || !strings.Contains(string(tools), `"book_flight"`) {
		t.Errorf("tools offered to the model: %s", tools)
	}
	// The tool's envelope went back to the model.
	second, _ := json.Marshal(fake.requests[1]["messages"])
	if !strings.Contains(string(second), `\"status\":\"success\"`) {
		t.Errorf("the envelope did not reach the model: %s", second)
	}
	if _, err := demo.Run(context.Background(), example, []string{"-llm", "openai"}, &out, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("no key: %v", err)
	}
}
