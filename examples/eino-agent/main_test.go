package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// Every fault ends in one booking: a success, then the model's "just to be
// sure" resend replayed.
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
			if !strings.HasSuffix(out.String(), "bookings: 1\n") {
				t.Errorf("transcript does not end with the booking count:\n%s", out.String())
			}
		})
	}
}

// The -json line reports one booking under the lost-response fault.
func TestJSONLineUnderLostResponse(t *testing.T) {
	var out bytes.Buffer
	if _, err := demo.Run(context.Background(), example, []string{"-json"}, &out, os.Getenv); err != nil {
		t.Fatal(err)
	}
	var line struct {
		Example, Fault string
		Effects        int
		Envelopes      []envelope.Envelope
	}
	if err := json.Unmarshal(out.Bytes(), &line); err != nil || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("-json printed %q (%v)", out.String(), err)
	}
	if line.Example != "eino-agent" || line.Fault != "lost-response" || line.Effects != 1 || line.Envelopes[0].Attempts != 2 {
		t.Errorf("-json: %s", out.String())
	}
}

// With -llm openai the same agent talks to the server OPENAI_BASE_URL names.
func TestOpenAIPath(t *testing.T) {
	fake := &demo.FakeOpenAI{Tool: "book_flight", Args: `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`, Answer: "Ana Lima is booked."}
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
	reqs := fake.Requests()
	if len(reqs) != 2 || reqs[0]["model"] != "test-model" {
		t.Fatalf("the fake server saw %d requests: %v", len(reqs), reqs)
	}
	tools, _ := json.Marshal(reqs[0]["tools"])
	if !strings.Contains(string(tools), `"passenger"`) {
		t.Errorf("tools offered to the model: %s", tools)
	}
	second, _ := json.Marshal(reqs[1]["messages"])
	if !strings.Contains(string(second), `\"status\":\"success\"`) || !strings.Contains(string(second), `"tool_call_id":"call_1"`) {
		t.Errorf("the envelope did not reach the model as the call's tool message: %s", second)
	}
	if _, err := demo.Run(context.Background(), example, []string{"-llm", "openai"}, &out, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("no key: %v", err)
	}
}
