package main

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

var notesPlan = adversary.Plan{
	Tool:     "append_note",
	Base:     `{"incident_id":"INC-104","text":"Check carrier scan"}`,
	Reworded: `{"incident_id":"INC-104","text":"Check the carrier's scan history"}`,
}

// An adversarial model, through the real executor, appends no second note
// with any fault, and every envelope it reads is true.
func TestAdversarialModel(t *testing.T) {
	for fault, want := range map[string]int{"none": 1, "closed-incident": 0} {
		t.Run(fault, func(t *testing.T) {
			adversary.RunExample(t, example, notesPlan, fault, want)
		})
		t.Run(fault+"/parallel", func(t *testing.T) {
			adversary.RunParallel(t, example, notesPlan, fault, want)
		})
	}
}
