package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

type toolCall struct{ name, args string }

// parallelFake plays a fixed script of assistant turns, each with several
// tool_calls (OpenAI parallel tool calling), possibly of different tools.
type parallelFake struct {
	turns [][]toolCall
	mu    sync.Mutex
	n     int
}

func (f *parallelFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.ReadAll(r.Body)
	f.mu.Lock()
	turn := f.n
	f.n++
	f.mu.Unlock()
	message := map[string]any{"role": "assistant", "content": "Done."}
	finish := "stop"
	if turn < len(f.turns) && len(f.turns[turn]) > 0 {
		var calls []any
		for i, c := range f.turns[turn] {
			calls = append(calls, map[string]any{"id": fmt.Sprintf("call_%d_%d", turn, i), "type": "function",
				"function": map[string]any{"name": c.name, "arguments": c.args}})
		}
		message = map[string]any{"role": "assistant", "content": "", "tool_calls": calls}
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-r10", "object": "chat.completion", "created": 1, "model": "test-model",
		"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
}

// Turns that mix the two tools, with identical, cosmetic and reworded
// copies in one turn. Every envelope is held against the destinations.
func TestReview10_StarterParallelMixedTurns(t *testing.T) {
	const msg = `{"channel":"billing","text":"Invoice INV-1001 sent to ACME Corp: 360.00 EUR."}`
	const msgCosmetic = `{"channel":"Billing ","text":"invoice  INV-1001 sent to acme corp: 360.00 eur."}`
	const msgReworded = `{"channel":"billing","text":"ACME Corp has been invoiced (INV-1001, 360 EUR)."}`
	invCosmetic := `{"customer":"ACME  CORP","description":"Consulting, 3 hours at 120.00 EUR","amount_cents":36000,"currency":"EUR"}`
	turns := map[string][][]toolCall{
		"both-tools-one-turn": {
			{{"create_invoice", invoiceFor}, {"post_message", msg}},
			{{"post_message", msg}, {"post_message", msgReworded}, {"create_invoice", invCosmetic}, {"post_message", msgCosmetic}},
			{{"post_message", msgReworded}},
			{},
		},
		"reworded-first": {
			{{"create_invoice", invoiceFor}},
			{{"post_message", msg}},
			{{"post_message", msgReworded}, {"post_message", msgCosmetic}, {"post_message", msg}, {"create_invoice", invoiceFor}},
			{},
		},
	}
	for _, fault := range []string{"lost-responses"} {
		for name, script := range turns {
			t.Run(fault+"/"+name, func(t *testing.T) {
				srv := httptest.NewServer(&parallelFake{turns: script})
				defer srv.Close()
				env := map[string]string{"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_MODEL": "test-model"}
				var out bytes.Buffer
				rep, err := run(context.Background(), []string{"-llm", "openai", "-fault", fault}, &out, func(k string) string { return env[k] })
				if err != nil {
					t.Fatalf("%v\n%s", err, out.String())
				}
				for _, c := range rep.Calls {
					t.Logf("%s (invoices %d, messages %d): %s", c.Tool, c.Invoices, c.Messages, c.Envelope)
					if c.Envelope.Error != nil && c.Envelope.Earlier != nil && c.Envelope.Status == "definite_failure" {
						continue // a refusal that met an earlier action: its state is in earlier (README)
					}
					truthful(t, c)
				}
				if rep.Invoices != 1 || rep.Messages != 1 {
					t.Errorf("%d invoices, %d messages; want 1 and 1\n%s", rep.Invoices, rep.Messages, out.String())
				}
			})
		}
	}
}
