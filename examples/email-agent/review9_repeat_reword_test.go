package main

import (
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
)

// The NoticeHold answer was given only when the unknown fence settled the
// earlier action; now also when a call of the action itself settles it. When the model's next turn carries the
// identical resend AND a reworded one (parallel tool_calls, run one after
// the other by the executor), the identical resend settles the earlier
// action through its own claim (reconciled success), and the reworded call
// of the same turn — made before the model read either answer — found
// nothing to fence and sent a second email to Ana.
func TestReview9_RepeatThenRewordInOneTurnSendsOne(t *testing.T) {
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
