package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// A reworded email sent twice in one assistant turn (parallel tool calls)
// sends no second email.
//
// After an unknown outcome, a model that sends its reworded email twice in
// ONE assistant turn (parallel tool_calls, identical or in other words)
// got a second email to Ana: the first reworded call settled the earlier
// action through the unknown fence (earlier_action_applied) and gave its
// key back; the second, in the same turn, before the model or the user
// could read that answer, found nothing left to fence and was sent. The
// fence's answer now holds for Options.NoticeHold.
func TestTurn_ParallelRewordedResendSendsNoSecondEmail(t *testing.T) {
	const first = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const reworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you? Best, Sam"}`
	const reworded2 = `{"to":"ana@example.com","subject":"Friday lunch?","body":"Hi Ana, are you free for lunch at noon on Friday? Sam"}`
	for name, second := range map[string]string{"same-arguments": reworded, "other-wording": reworded2} {
		t.Run(name, func(t *testing.T) { parallelResend(t, first, reworded, second) })
	}
}

// playTurns runs the email agent under fault, driven through the OpenAI
// wire format by a model that plays turns, and returns its summary and
// transcript.
func playTurns(t *testing.T, fault string, turns [][]string) (demo.Summary, string) {
	t.Helper()
	srv := httptest.NewServer(&demo.ScriptedOpenAI{Tool: "send_email", Turns: turns})
	defer srv.Close()
	env := map[string]string{"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_MODEL": "test-model"}
	var out bytes.Buffer
	sum, err := demo.Run(context.Background(), example,
		[]string{"-llm", "openai", "-fault", fault, "-db", filepath.Join(t.TempDir(), "r.db")}, &out,
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return sum, out.String()
}

func parallelResend(t *testing.T, first, reworded, second string) {
	sum, transcript := playTurns(t, "reword", [][]string{{first}, {reworded, second}, {}})
	t.Logf("transcript:\n%s", transcript)
	if len(sum.Envelopes) != 3 {
		t.Fatalf("%d envelopes, want 3", len(sum.Envelopes))
	}
	if sum.Envelopes[0].Status != envelope.UnknownOutcome {
		t.Fatalf("first call: %s", sum.Envelopes[0])
	}
	if e := sum.Envelopes[1]; e.Error == nil || e.Error.Code != envelope.CodeEarlierApplied {
		t.Fatalf("second call: %s", e)
	}
	if e := sum.Envelopes[2]; e.Error == nil || e.Error.Code != envelope.CodeEarlierApplied {
		t.Errorf("third call, in the same turn: %s; want earlier_action_applied", e)
	}
	if sum.Effects != 1 {
		t.Errorf("one logical action (email Ana about lunch) left %d emails in the mailbox, want 1; the third envelope: %s",
			sum.Effects, sum.Envelopes[2])
	}
}

// The identical resend and a reworded copy in one turn send one email.
//
// The NoticeHold answer was given only when the unknown fence settled the
// earlier action; now also when a call of the action itself settles it. When the model's next turn carries the
// identical resend AND a reworded one (parallel tool_calls, run one after
// the other by the executor), the identical resend settles the earlier
// action through its own claim (reconciled success), and the reworded call
// of the same turn — made before the model read either answer — found
// nothing to fence and sent a second email to Ana.
func TestTurn_RepeatThenRewordSendsOne(t *testing.T) {
	const first = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const reworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you? Best, Sam"}`
	sum, transcript := playTurns(t, "reword", [][]string{{first}, {first, reworded}, {}})
	t.Logf("transcript:\n%s", transcript)
	if len(sum.Envelopes) != 3 {
		t.Fatalf("%d envelopes, want 3", len(sum.Envelopes))
	}
	if sum.Envelopes[0].Status != envelope.UnknownOutcome {
		t.Fatalf("first call: %s", sum.Envelopes[0])
	}
	if sum.Effects != 1 {
		t.Errorf("one logical action (email Ana about lunch) left %d emails in the mailbox, want 1; the turn's envelopes:\n%s\n%s",
			sum.Effects, sum.Envelopes[1], sum.Envelopes[2])
	}
}

// A turn of identical, cosmetic, reworded and keyed copies after
// unknown_outcome leaves one email and never a success without it, under
// every fault.
//
// One assistant turn after unknown_outcome carries the identical resend, a
// cosmetic variant (case and spacing of the subject and address), a reworded
// copy and an invented idempotency key; a later turn another wording. Every
// envelope must be held against the mailbox, and the mailbox must hold one
// email.
func TestTurn_MixedCopiesAfterUnknownSendOne(t *testing.T) {
	const first = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const cosmetic = `{"to":"ANA@example.com ","subject":"lunch  on friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const reworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you? Best, Sam"}`
	const keyed = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam","idempotency_key":"x1"}`
	const reworded2 = `{"to":"ana@example.com","subject":"Friday lunch?","body":"Hi Ana, are you free for lunch at noon on Friday? Sam"}`
	orders := map[string][][]string{
		"resend-first":   {{first}, {first, cosmetic, reworded, keyed}, {reworded2}, {}},
		"reworded-first": {{first}, {reworded, cosmetic, first, keyed}, {reworded2}, {}},
		"cosmetic-first": {{first}, {cosmetic, reworded, reworded2, first}, {}},
	}
	for _, fault := range []string{"reword", "lost-ack", "index-down"} {
		for name, turns := range orders {
			t.Run(fault+"/"+name, func(t *testing.T) {
				sum, transcript := playTurns(t, fault, turns)
				succ := 0
				for _, e := range sum.Envelopes {
					if e.Status == envelope.Success && !e.Replayed {
						succ++
					}
				}
				if sum.Effects > 1 || succ > 1 {
					t.Errorf("%d emails, %d fresh successes; transcript:\n%s", sum.Effects, succ, transcript)
				}
				if sum.Effects == 0 && succ > 0 {
					t.Errorf("success without an email; transcript:\n%s", transcript)
				}
			})
		}
	}
}

// An email and a reworded copy of it in one assistant message send one
// email when the first send's outcome is unknown (docs/agent-loops.md,
// "Parallel tool calls"); when it succeeds, the copy is a second action,
// and both envelopes say what happened.
func TestTurn_EmailAndRewordedCopyInOneMessageSendOne(t *testing.T) {
	const first = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const reworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you? Best, Sam"}`
	for _, fault := range []string{"none", "lost-ack", "reword", "index-down"} {
		t.Run(fault, func(t *testing.T) {
			sum, transcript := playTurns(t, fault, [][]string{{first, reworded}, {}})
			fresh := 0
			for _, e := range sum.Envelopes {
				if e.Status == envelope.Success && !e.Replayed {
					fresh++
				}
			}
			want := 1
			if fault == "none" {
				want = 2 // nothing was unknown: two emails of the tool, both sent, both told
			}
			if sum.Effects != want || fresh > sum.Effects {
				t.Errorf("one message with an email and a reworded copy of it (%s): %d emails, %d fresh successes; want %d; transcript:\n%s",
					fault, sum.Effects, fresh, want, transcript)
			}
		})
	}
}
