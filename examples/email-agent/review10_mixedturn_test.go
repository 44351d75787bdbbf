package main

import (
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
)

// One assistant turn after unknown_outcome carries the identical resend, a
// cosmetic variant (case and spacing of the subject and address), a reworded
// copy and an invented idempotency key; a later turn another wording. Every
// envelope must be held against the mailbox, and the mailbox must hold one
// email.
func TestReview10_MixedTurnAfterUnknown(t *testing.T) {
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
