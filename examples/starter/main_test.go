package main

import (
	"bytes"
	"context"
	"encoding/json"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"fmt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

func noEnv(string) string { return "" }

// truthful fails the test for an envelope that the destinations, counted
// right after the call, contradict: success with no effect, a failure that
// says nothing happened while the effect is there, or more than one effect.
func truthful(t *testing.T, c call) {
	t.Helper()
	if err := c.Envelope.Validate(); err != nil {
		t.Errorf("%s: invalid envelope %s: %v", c.Tool, c.Envelope, err)
	}
	effects := map[string]int{"create_invoice": c.Invoices, "post_message": c.Messages}[c.Tool]
	switch env := c.Envelope; {
	case effects > 1:
		t.Errorf("%s: %d effects at the destination after %s", c.Tool, effects, env)
	case env.Status == envelope.Success && effects != 1:
		t.Errorf("%s: success, but the destination has %d effects", c.Tool, effects)
	case env.Status == envelope.DefiniteFailure && (env.Earlier == nil || env.Earlier.State != envelope.ActionSucceeded) && effects != 0:
		t.Errorf("%s: definite_failure says nothing happened, but the destination has %d effects", c.Tool, effects)
	}
}

func TestLostResponses(t *testing.T) {
	var out bytes.Buffer
	rep, err := run(context.Background(), nil, &out, noEnv)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	if rep.Invoices != 1 || rep.Messages != 1 || !strings.HasSuffix(text, "invoices: 1, messages: 1\n") {
		t.Fatalf("%d invoices and %d messages, want 1 and 1:\n%s", rep.Invoices, rep.Messages, text)
	}
	for _, c := range rep.Calls {
		truthful(t, c)
	}
	// The calls: the invoice after a keyed retry; the message unknown, then
	// the model's repeat, which asked the chat API's search and posted nothing.
	if len(rep.Calls) != 3 {
		t.Fatalf("%d tool calls, want 3:\n%s", len(rep.Calls), text)
	}
	inv, first, again := rep.Calls[0], rep.Calls[1], rep.Calls[2]
	if inv.Tool != "create_invoice" || inv.Envelope.Status != envelope.Success || inv.Envelope.Attempts != 2 ||
		!strings.Contains(string(inv.Envelope.Result), `"number":"INV-1001"`) {
		t.Errorf("create_invoice: %s; want INV-1001 after 2 attempts", inv.Envelope)
	}
	for _, c := range []call{first, again} {
		if c.Tool != "post_message" || c.Envelope.Status != envelope.UnknownOutcome || c.Envelope.Next != envelope.DoNotRetry ||
			c.Envelope.RequestRef != first.Envelope.RequestRef || c.Messages != 1 {
			t.Errorf("post_message: %s with %d messages; want unknown_outcome, do_not_retry, one reference, one message", c.Envelope, c.Messages)
		}
	}
	if !strings.Contains(rep.Answer, "INV-1001") || !strings.Contains(rep.Answer, "being checked") {
		t.Errorf("the agent's answer does not tell the truth about both: %q", rep.Answer)
	}
	// The operator step ran and settled the message as applied.
	if len(rep.Settled) != 1 {
		t.Fatalf("the operator settled %d actions, want 1:\n%s", len(rep.Settled), text)
	}
	s := rep.Settled[0]
	if s.Ref != first.Envelope.RequestRef || s.Verdict != reconcile.Applied || s.State != agenttool.Succeeded {
		t.Errorf("operator: %+v; want %s applied and succeeded", s, first.Envelope.RequestRef)
	}
	for _, want := range []string{
		"operator: 1 action awaits reconciliation\n",
		"operator: " + s.Ref + " for Ana Ruiz, billing (unknown, 1 attempt): asking the destination\n",
		"operator: " + s.Ref + " is now succeeded (applied, by operator:maria)\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the transcript lacks %q:\n%s", want, text)
		}
	}
}

func TestNoFault(t *testing.T) {
	var out bytes.Buffer
	rep, err := run(context.Background(), []string{"-fault", "none"}, &out, noEnv)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if rep.Invoices != 1 || rep.Messages != 1 || len(rep.Calls) != 2 || len(rep.Settled) != 0 {
		t.Fatalf("%d invoices, %d messages, %d calls, %d settled; want 1, 1, 2, 0:\n%s", rep.Invoices, rep.Messages, len(rep.Calls), len(rep.Settled), out.String())
	}
	for _, c := range rep.Calls {
		truthful(t, c)
		if c.Envelope.Status != envelope.Success || c.Envelope.Attempts != 1 {
			t.Errorf("%s: %s; want success at the first attempt", c.Tool, c.Envelope)
		}
	}
	if !strings.Contains(out.String(), "operator: nothing awaits reconciliation\n") {
		t.Errorf("the operator step did not report:\n%s", out.String())
	}
}

// TestSecondRunRepeatsNothing runs the program twice on one store file: the
// second run's calls are answered from the store, and its (new, empty)
// APIs receive nothing.
func TestSecondRunRepeatsNothing(t *testing.T) {
	db := filepath.Join(t.TempDir(), "retrysafe.db")
	if _, err := run(context.Background(), []string{"-db", db}, io.Discard, noEnv); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep, err := run(context.Background(), []string{"-db", db}, &out, noEnv)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if rep.Invoices != 0 || rep.Messages != 0 || len(rep.Calls) != 2 {
		t.Fatalf("second run: %d invoices, %d messages, %d calls; want 0, 0, 2:\n%s", rep.Invoices, rep.Messages, len(rep.Calls), out.String())
	}
	for _, c := range rep.Calls {
		if c.Envelope.Status != envelope.Success || !c.Envelope.Replayed {
			t.Errorf("%s: %s; want the first run's success replayed", c.Tool, c.Envelope)
		}
	}
}

// fakeOpenAI speaks the chat-completions wire format with tool calls: it
// creates the invoice, posts a message, then answers in words.
type fakeOpenAI struct {
	mu       sync.Mutex
	requests []map[string]any
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer test-key" {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	results := 0
	for _, m := range req["messages"].([]any) {
		if m.(map[string]any)["role"] == "tool" {
			results++
		}
	}
	toolCall := func(name, args string) map[string]any {
		return map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{
			"id": "call_" + strconv.Itoa(results+1), "type": "function", "function": map[string]any{"name": name, "arguments": args},
		}}}
	}
	message, finish := map[string]any{"role": "assistant", "content": "Done."}, "stop"
	switch results {
	case 0:
		message, finish = toolCall("create_invoice", invoiceFor), "tool_calls"
	case 1:
		message, finish = toolCall("post_message", `{"channel":"billing","text":"Invoice INV-1001 is out."}`), "tool_calls"
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
	rep, err := run(context.Background(), []string{"-llm", "openai"}, &out, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if rep.Invoices != 1 || rep.Messages != 1 || len(rep.Calls) != 2 || len(rep.Settled) != 1 || rep.Answer != "Done." {
		t.Fatalf("through the OpenAI path: %+v\n%s", rep, out.String())
	}
	if len(fake.requests) != 3 || fake.requests[0]["model"] != "test-model" {
		t.Fatalf("the fake server saw %d requests: %v", len(fake.requests), fake.requests)
	}
	// The model was offered the tools' real input schemas, not one string.
	offered, _ := json.Marshal(fake.requests[0]["tools"])
	for _, want := range []string{`"create_invoice"`, `"amount_cents"`, `"post_message"`, `"channel"`} {
		if !strings.Contains(string(offered), want) {
			t.Errorf("the tools offered to the model lack %s: %s", want, offered)
		}
	}
	// The envelopes went back to the model.
	last, _ := json.Marshal(fake.requests[2]["messages"])
	if !strings.Contains(string(last), `\"status\":\"success\"`) || !strings.Contains(string(last), `\"status\":\"unknown_outcome\"`) {
		t.Errorf("the envelopes did not reach the model: %s", last)
	}
	if _, err := run(context.Background(), []string{"-llm", "openai"}, io.Discard, noEnv); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("without a key: %v", err)
	}
}

// TestImportsNothingInternal keeps the example copyable: a program outside
// this module cannot import retrysafe's internal packages.
func TestImportsNothingInternal(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files here: %v", err)
	}
	retrysafe := 0
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/retrysafe/retrysafe/") {
				retrysafe++
			}
			if path == "github.com/retrysafe/retrysafe/internal" || strings.HasPrefix(path, "github.com/retrysafe/retrysafe/internal/") {
				t.Errorf("%s imports %s; a user's copy could not build", name, path)
			}
		}
	}
	if retrysafe == 0 {
		t.Error("no file imports retrysafe: the check read the wrong files")
	}
}

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
		"id": "chatcmpl-parallel", "object": "chat.completion", "created": 1, "model": "test-model",
		"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
}

// Turns of parallel tool calls of both tools, with identical, cosmetic and
// reworded copies: every envelope truthful, one invoice and one message.
//
// Turns that mix the two tools, with identical, cosmetic and reworded
// copies in one turn. Every envelope is held against the destinations.
func TestParallelTurns_HeldAgainstTheDestinations(t *testing.T) {
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
