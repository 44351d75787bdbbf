package main

import (
	"fmt"
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

// An adversarial model over the OpenAI wire format — parallel and
// repeated calls, restated and reworded bookings, malformed arguments,
// pasted references, tools that do not exist — gets one booking per
// action under every fault, and every envelope it reads is true.
func TestAnAdversarialModelOverTheWireGetsOneEffectPerAction(t *testing.T) {
	for _, fault := range []string{"lost-response", "none", "unavailable", "slow"} {
		for seed := range uint64(2) {
			t.Run(fmt.Sprintf("%s/seed-%d", fault, seed), func(t *testing.T) {
				adversary.RunWire(t, example, adversary.WireRun{Plan: bookingPlan, Fault: fault, Want: 1, Seed: seed})
			})
		}
	}
}
