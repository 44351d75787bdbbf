package main

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

var emailPlan = adversary.Plan{
	Tool:     "send_email",
	Base:     `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`,
	Reworded: `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you? Best, Sam"}`,
}

// An adversarial model, through the real executor, gets no second email
// past send_email with any fault, and every envelope it reads is true.
func TestAdversarialModel(t *testing.T) {
	for fault, want := range map[string]int{"lost-ack": 1, "none": 1, "bad-recipient": 0, "reword": 1, "index-down": 1} {
		t.Run(fault, func(t *testing.T) {
			adversary.RunExample(t, example, emailPlan, fault, want)
		})
		t.Run(fault+"/parallel", func(t *testing.T) {
			adversary.RunParallel(t, example, emailPlan, fault, want)
		})
	}
}
