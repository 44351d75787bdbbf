package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool/modeltest"
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
	if len(fake.Requests()) != 2 || fake.Requests()[0]["model"] != "test-model" {
		t.Fatalf("the fake server saw %d requests: %v", len(fake.Requests()), fake.Requests())
	}
	// The model was given the tool's real input schema, not one string.
	tools, _ := json.Marshal(fake.Requests()[0]["tools"])
	if !strings.Contains(string(tools), `"passenger"`) || !strings.Contains(string(tools), `"book_flight"`) {
		t.Errorf("tools offered to the model: %s", tools)
	}
	// The tool's envelope went back to the model.
	second, _ := json.Marshal(fake.Requests()[1]["messages"])
	if !strings.Contains(string(second), `\"status\":\"success\"`) {
		t.Errorf("the envelope did not reach the model: %s", second)
	}
	if _, err := demo.Run(context.Background(), example, []string{"-llm", "openai"}, &out, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("no key: %v", err)
	}
}

// playTurns runs the booking agent under fault, driven through the OpenAI
// wire format by a model that plays turns of book_flight calls (several in
// one message, as parallel tool calls; an empty turn answers in words),
// and returns its summary and transcript.
func playTurns(t *testing.T, fault string, turns [][]string) (demo.Summary, string) {
	t.Helper()
	n := 0
	srv := modeltest.ChatCompletions(func([]string) modeltest.Reply {
		if n >= len(turns) || len(turns[n]) == 0 {
			return modeltest.Final("Done.")
		}
		var calls []modeltest.Call
		for _, args := range turns[n] {
			calls = append(calls, modeltest.Call{Name: "book_flight", Arguments: args})
		}
		n++
		return modeltest.Calls(calls...)
	})
	url, stop, err := srv.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	env := map[string]string{"OPENAI_API_KEY": modeltest.Key, "OPENAI_BASE_URL": url + "/v1", "OPENAI_MODEL": "test-model"}
	var out bytes.Buffer
	sum, err := demo.Run(context.Background(), example,
		[]string{"-llm", "openai", "-fault", fault, "-db", filepath.Join(t.TempDir(), "r.db")}, &out,
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return sum, out.String()
}

// A passenger's name whose space is written with a character that shows
// as a blank (a Hangul or Braille filler) or whose letter is a lookalike
// from another script is a cosmetic variant of the name: it meets the
// first booking's key and books nothing more.
func TestCosmeticNameVariantBooksNoSecondSeat(t *testing.T) {
	const base = `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`
	variants := map[string]string{
		"hangul-filler":           "Ana\u3164Lima",
		"halfwidth-hangul-filler": "Ana\uffa0Lima",
		"braille-blank":           "Ana\u2800Lima",
		"cyrillic-a":              "\u0410na Lima",
	}
	for name, passenger := range variants {
		t.Run(name, func(t *testing.T) {
			variant := `{"flight":"TP1234","date":"2026-12-12","passenger":"` + passenger + `"}`
			for _, fault := range []string{"none", "lost-response"} {
				sum, transcript := playTurns(t, fault, [][]string{{base}, {variant}, {}})
				if sum.Effects != 1 {
					t.Errorf("-fault %s: Ana Lima, then the same name with %s, left %d bookings, want 1; transcript:\n%s",
						fault, name, sum.Effects, transcript)
				}
			}
		})
	}
}
