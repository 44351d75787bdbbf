package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/adversary"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// scriptedOpenAI plays fixed turns of parallel tool calls over the
// chat-completions wire format; the answer to request number slowAt comes
// after slow.
type scriptedOpenAI struct {
	tool   string
	turns  [][]string
	slowAt int
	slow   time.Duration
	mu     sync.Mutex
	n      int
}

func (f *scriptedOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.ReadAll(r.Body)
	f.mu.Lock()
	turn := f.n
	f.n++
	f.mu.Unlock()
	if turn == f.slowAt && f.slow > 0 {
		time.Sleep(f.slow)
	}
	message := map[string]any{"role": "assistant", "content": "Done."}
	finish := "stop"
	if turn < len(f.turns) && len(f.turns[turn]) > 0 {
		var calls []any
		for i, args := range f.turns[turn] {
			calls = append(calls, map[string]any{"id": fmt.Sprintf("call_%d_%d", turn, i), "type": "function",
				"function": map[string]any{"name": f.tool, "arguments": args}})
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

// The first booking's outcome is unknown (every attempt lost on
// the way); the model books in other words, which the fence lets go on in
// the first one's place (found not applied); the model ignores that and,
// NoticeHold + ClockSkew later, sends its first request again, verbatim.
func TestAdversary_TheOriginalResentAfterNoticeHoldBooksOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 12 s")
	}
	const first = `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`
	const reworded = `{"flight":"TP 1234","date":"2026-12-12","passenger":"Ana M. Lima"}`
	ex := adversary.WithLostRequests(example, 6)
	srv := httptest.NewServer(&scriptedOpenAI{tool: "book_flight", turns: [][]string{{first}, {reworded}, {first}, {first}, {}}, slowAt: 3, slow: 12 * time.Second})
	defer srv.Close()
	env := map[string]string{"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_MODEL": "m"}
	var out bytes.Buffer
	sum, err := demo.Run(context.Background(), ex, []string{"-llm", "openai", "-fault", adversary.LostRequest, "-db", filepath.Join(t.TempDir(), "r.db")}, &out,
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for i, e := range sum.Envelopes {
		t.Logf("envelope %d: %s", i, e)
	}
	fresh := 0
	for _, e := range sum.Envelopes {
		if e.Status == envelope.Success && !e.Replayed {
			fresh++
		}
	}
	if sum.Effects != 1 {
		t.Errorf("one logical action (book Ana on TP1234), %d bookings (%d fresh successes):\n%s", sum.Effects, fresh, out.String())
	}
}
