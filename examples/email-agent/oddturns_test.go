package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/adversary"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// Adversarial turns not in the adversary plans. Every call below is
// the same logical action (email Ana about Friday lunch).
func TestAdversary_OneEmailPerActionUnderOddTurns(t *testing.T) {
	const first = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const cyr = `{"to":"аna@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const inject = `{"to":"ana@example.com","subject":"Lunch on Friday?\r\nMessage-ID: <x@y>","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const split1 = `{"to":"ana@example.com","subject":"Lunch","body":"Hi Ana, lunch on Friday?"}`
	const split2 = `{"to":"ana@example.com","subject":"Lunch (2)","body":"At noon. Sam"}`
	const merged = `{"to":"ana@example.com, ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const extra = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam","cc":"bob@example.com"}`
	const msgid = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam","message_id":"<m1@agent.example>"}`
	const dupkey = `{"to":"bob@example.com","to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const angle = `{"to":"<ana@example.com>","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const big = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"`
	bigBody := big + strings.Repeat("x", 70000) + `"}`
	turns := map[string][][]string{
		"parallel-first": {{first, first, first}, {first}, {}},
		"cyrillic-first": {{cyr}, {first, cyr}, {split1, split2}, {}},
		"inject-first":   {{inject}, {first}, {inject, first}, {}},
		"split-after":    {{first}, {split1, split2}, {merged}, {split1}, {first}, {}},
		"extra-fields":   {{first}, {extra, msgid, dupkey, angle}, {bigBody}, {first}, {}},
		"angle-first":    {{angle}, {first}, {merged}, {}},
		"merged-first":   {{merged}, {first}, {split1}, {}},
	}
	for _, fault := range []string{"lost-ack", "reword", "index-down", "none"} {
		for name, tt := range turns {
			t.Run(fault+"/"+name, func(t *testing.T) {
				sum, transcript := playTurns(t, fault, tt)
				fresh := 0
				for _, e := range sum.Envelopes {
					if e.Status == envelope.Success && !e.Replayed {
						fresh++
					}
				}
				max := 1
				if fault == "none" {
					max = 99 // no unknown: rewording after success is a new action by design
				}
				if sum.Effects > max || fresh > sum.Effects || (sum.Effects == 0 && fresh > 0) {
					t.Errorf("%d emails, %d fresh successes; transcript:\n%s", sum.Effects, fresh, transcript)
				}
				t.Logf("%d emails\n%s", sum.Effects, transcript)
			})
		}
	}
}

func playTurnsEx(t *testing.T, ex demo.Example, fault string, turns [][]string) (demo.Summary, string) {
	t.Helper()
	srv := httptest.NewServer(&demo.ScriptedOpenAI{Tool: "send_email", Turns: turns})
	defer srv.Close()
	env := map[string]string{"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_MODEL": "test-model"}
	var out bytes.Buffer
	sum, err := demo.Run(context.Background(), ex,
		[]string{"-llm", "openai", "-fault", fault, "-db", filepath.Join(t.TempDir(), "r.db")}, &out,
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return sum, out.String()
}

// The same action's copies racing in one message (RunConcurrently).
func TestAdversary_ConcurrentCopiesSendOne(t *testing.T) {
	const first = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const cosmetic = `{"to":"ANA@example.com ","subject":"lunch  on friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const reworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you? Best, Sam"}`
	const reworded2 = `{"to":"ana@example.com","subject":"Friday lunch?","body":"Hi Ana, are you free for lunch at noon on Friday? Sam"}`
	ex := example
	ex.Loop = adversary.ConcurrentLoop
	turns := map[string][][]string{
		"first-turn":  {{first, reworded, reworded2, cosmetic, first}, {first, reworded}, {}},
		"second-turn": {{first}, {first, reworded, reworded2, cosmetic}, {reworded2, reworded}, {}},
		"reword-race": {{first}, {reworded, reworded2, reworded, reworded2}, {first}, {}},
	}
	for _, fault := range []string{"lost-ack", "reword", "index-down"} {
		for name, tt := range turns {
			t.Run(fault+"/"+name, func(t *testing.T) {
				sum, transcript := playTurnsEx(t, ex, fault, tt)
				fresh := 0
				for _, e := range sum.Envelopes {
					if e.Status == envelope.Success && !e.Replayed {
						fresh++
					}
				}
				if sum.Effects > 1 || fresh > sum.Effects || (sum.Effects == 0 && fresh > 0) {
					t.Errorf("%d emails, %d fresh successes; transcript:\n%s", sum.Effects, fresh, transcript)
				}
			})
		}
	}
}

// The model is told earlier_action_applied for its reworded copy, ignores
// it, and sends the same reworded copy again in its next turn, later than
// NoticeHold (10 s) + ClockSkew (1 s): one email, and the resend is
// answered as the copy was. (Found by a review: the notice's refusal was
// kept as the scope's notice alone, and once the notice ended the
// identical resend was a new action.)
func TestAdversary_AnIdenticalResendOfACopyHeldBackSendsNothing(t *testing.T) {
	const first = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const reworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you? Best, Sam"}`
	srv := httptest.NewServer(&demo.ScriptedOpenAI{Tool: "send_email", Turns: [][]string{{first}, {reworded}, {reworded}, {}}, SlowAt: 2, Slow: 12 * time.Second})
	defer srv.Close()
	env := map[string]string{"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_MODEL": "test-model"}
	var out bytes.Buffer
	sum, err := demo.Run(context.Background(), example,
		[]string{"-llm", "openai", "-fault", "reword", "-db", filepath.Join(t.TempDir(), "r.db")}, &out,
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(sum.Envelopes) != 3 {
		t.Fatalf("%d envelopes\n%s", len(sum.Envelopes), out.String())
	}
	held, resend := sum.Envelopes[1], sum.Envelopes[2]
	if held.Error == nil || held.Error.Code != envelope.CodeEarlierApplied {
		t.Fatalf("the reworded copy: %s; want earlier_action_applied\n%s", held, out.String())
	}
	if resend.Error == nil || resend.Error.Code != envelope.CodeEarlierApplied || !resend.Replayed || resend.RequestRef != held.RequestRef {
		t.Errorf("the copy sent again after the notice: %s; want its answer replayed", resend)
	}
	if sum.Effects != 1 {
		t.Errorf("one logical action, %d emails; the model ignored earlier_action_applied after NoticeHold:\n%s", sum.Effects, out.String())
	}
}
