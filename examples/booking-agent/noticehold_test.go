package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/adversary"
	"github.com/retrysafe/retrysafe/internal/demo"
)

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
	srv := httptest.NewServer(&demo.ScriptedOpenAI{Tool: "book_flight", Turns: [][]string{{first}, {reworded}, {first}, {first}, {}}, SlowAt: 3, Slow: 12 * time.Second})
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
