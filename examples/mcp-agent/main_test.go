package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// Under each fault the booking service ends with one booking (none when
// the user is not signed in), and the model reads the truth.
func TestFaults(t *testing.T) {
	tests := []struct {
		fault    string
		bookings int
		want     []envelope.Status
		attempts int // of the first call
		code     string
	}{
		{"lost-response", 1, []envelope.Status{envelope.Success, envelope.Success}, 2, ""},
		// The refusal of the second copy is not the booking's: the client
		// resends, and the server replays what the first copy booked.
		{"duplicate-delivery", 1, []envelope.Status{envelope.Success, envelope.Success}, 2, ""},
		{"none", 1, []envelope.Status{envelope.Success, envelope.Success}, 1, ""},
		{"unauthenticated", 0, []envelope.Status{envelope.DefiniteFailure}, 1, "unauthenticated"},
	}
	if len(tests) != len(example.Faults) {
		t.Fatalf("%d faults tested, %d offered", len(tests), len(example.Faults))
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			var out bytes.Buffer
			sum, err := demo.Run(context.Background(), example, []string{"-fault", tt.fault}, &out, os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			var got []envelope.Status
			for _, e := range sum.Envelopes {
				got = append(got, e.Status)
			}
			if sum.Effects != tt.bookings || !slices.Equal(got, tt.want) {
				t.Fatalf("%d bookings, statuses %v; want %d, %v\n%s", sum.Effects, got, tt.bookings, tt.want, out.String())
			}
			first := sum.Envelopes[0]
			if first.Attempts != tt.attempts || (first.Error != nil) != (tt.code != "") || (first.Error != nil && first.Error.Code != tt.code) {
				t.Errorf("the first envelope %s; want %d attempts and code %q", first, tt.attempts, tt.code)
			}
			if len(sum.Envelopes) == 2 && (!sum.Envelopes[1].Replayed || string(sum.Envelopes[1].Result) != string(first.Result)) {
				t.Errorf("the repeat %s; want the first booking replayed", sum.Envelopes[1])
			}
			if tt.bookings == 1 && strings.Count(out.String(), "booking service: committed") != 1 {
				t.Errorf("the transcript shows other than one commit:\n%s", out.String())
			}
			if want := map[int]string{0: "bookings: 0\n", 1: "bookings: 1\n"}[tt.bookings]; !strings.HasSuffix(out.String(), want) {
				t.Errorf("the transcript does not end with %q:\n%s", want, out.String())
			}
		})
	}
}

// -json prints one line with the example, the fault, the bookings counted
// at the service, and the envelopes the model read: one booking, also
// when a proxy delivers the call twice.
func TestJSONLine(t *testing.T) {
	for _, fault := range []string{"lost-response", "duplicate-delivery"} {
		t.Run(fault, func(t *testing.T) {
			var out bytes.Buffer
			if _, err := demo.Run(context.Background(), example, []string{"-json", "-fault", fault}, &out, os.Getenv); err != nil {
				t.Fatal(err)
			}
			var line struct {
				Example, Fault string
				Effects        int
				Envelopes      []envelope.Envelope
			}
			if strings.Count(out.String(), "\n") != 1 || json.Unmarshal(out.Bytes(), &line) != nil {
				t.Fatalf("want one line of JSON, got:\n%s", out.String())
			}
			if line.Example != "mcp-agent" || line.Fault != fault || line.Effects != 1 || len(line.Envelopes) != 2 ||
				line.Envelopes[0].Status != envelope.Success {
				t.Errorf("the line says %+v", line)
			}
		})
	}
}

// Through an OpenAI-compatible model, the tool listed by the MCP server is
// offered with its members, and the booking survives the lost response.
func TestOpenAIPath(t *testing.T) {
	fake := &demo.FakeOpenAI{Tool: "book_flight", Args: `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`, Answer: "Ana Lima is booked."}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	env := map[string]string{"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_MODEL": "test-model"}
	var out bytes.Buffer
	sum, err := demo.Run(context.Background(), example, []string{"-llm", "openai", "-fault", "lost-response"}, &out,
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if sum.Effects != 1 || len(sum.Envelopes) != 1 || sum.Envelopes[0].Status != envelope.Success || sum.Envelopes[0].Attempts != 2 {
		t.Fatalf("through the OpenAI path: %+v\n%s", sum, out.String())
	}
	tools, _ := json.Marshal(fake.Requests()[0]["tools"])
	if !strings.Contains(string(tools), `passenger`) || !strings.Contains(string(tools), `"book_flight"`) {
		t.Errorf("tools offered to the model: %s", tools)
	}
}
