package main

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

// An adversarial model over the OpenAI wire format, through an Eino react
// agent — parallel and repeated calls, restated and reworded bookings,
// malformed arguments, pasted references, tools that do not exist — gets
// one booking per action under every fault (and with the network losing
// every attempt of the first booking), and every envelope it reads is
// true.
func TestAnAdversarialModelOverTheWireGetsOneEffectPerAction(t *testing.T) {
	ex := adversary.WithLostRequests(example, 6)
	for i, fault := range []string{"lost-response", "none", "unavailable", "slow", adversary.LostRequest} {
		t.Run(fault, func(t *testing.T) {
			adversary.RunWire(t, ex, adversary.WireRun{Plan: bookingPlan, Fault: fault, Want: 1, Seed: uint64(30 + i)})
		})
	}
}
