package main

import (
	"fmt"
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

// An adversarial model over the OpenAI wire format, through the plain
// openai-go loop — parallel and repeated calls, restated and reworded
// bookings, malformed arguments, pasted references, tools that do not
// exist — gets one booking under every fault, and every envelope it reads
// is true. The loop records a message's envelopes after running all its
// calls, so the bookings are counted per message.
func TestAnAdversarialModelOverTheWireGetsOneEffectPerAction(t *testing.T) {
	for fault, want := range map[string]int{"lost-response": 1, "none": 1, "unavailable": 1, "slow": 1} {
		for seed := range uint64(2) {
			t.Run(fmt.Sprintf("%s/seed-%d", fault, seed), func(t *testing.T) {
				adversary.RunWire(t, example, adversary.WireRun{Plan: bookingPlan, Fault: fault, Want: want, Seed: seed, PerMessage: true})
			})
		}
	}
}
