package main

import (
	"fmt"
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

// An adversarial model over the OpenAI wire format — parallel and repeated
// calls, restated and reworded notes, malformed arguments, pasted
// references, tools that do not exist — appends one note (none to a closed
// incident), and every envelope it reads is true.
func TestAnAdversarialModelOverTheWireGetsOneEffectPerAction(t *testing.T) {
	for fault, want := range map[string]int{"none": 1, "closed-incident": 0} {
		for seed := range uint64(2) {
			t.Run(fmt.Sprintf("%s/seed-%d", fault, seed), func(t *testing.T) {
				adversary.RunWire(t, example, adversary.WireRun{Plan: notesPlan, Fault: fault, Want: want, Seed: seed})
			})
		}
	}
}
