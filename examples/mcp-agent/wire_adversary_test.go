package main

import (
	"fmt"
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

// An adversarial model over the OpenAI wire format, through the executor
// and both sides of MCP — parallel and repeated calls, restated and
// reworded bookings, malformed arguments, pasted references, tools that do
// not exist — gets one booking under every fault (none without a token),
// and every envelope it reads is true.
func TestAnAdversarialModelOverTheWireGetsOneEffectPerAction(t *testing.T) {
	for fault, want := range map[string]int{"lost-response": 1, "duplicate-delivery": 1, "none": 1, "unauthenticated": 0} {
		for seed := range uint64(2) {
			t.Run(fmt.Sprintf("%s/seed-%d", fault, seed), func(t *testing.T) {
				adversary.RunWire(t, example, adversary.WireRun{Plan: bookingPlan, Fault: fault, Want: want, Seed: seed})
			})
		}
	}
}
