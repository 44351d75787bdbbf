package main

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

// An adversarial model over the OpenAI wire format — parallel and repeated
// calls, restated and reworded bookings, malformed arguments, pasted
// references, tools that do not exist — gets one booking per action under
// every fault, and every envelope it reads is true. With the network
// losing every attempt of the first booking, the first call's outcome is
// unknown and the service has never heard of it: a reworded copy goes on
// in its place, and the first is never booked as well.
func TestAnAdversarialModelOverTheWireGetsOneEffectPerAction(t *testing.T) {
	ex := adversary.WithLostRequests(example, 6) // 6: every attempt of one call
	for i, fault := range []string{"lost-response", "none", "unavailable", "slow", adversary.LostRequest} {
		t.Run(fault, func(t *testing.T) {
			adversary.RunWire(t, ex, adversary.WireRun{Plan: bookingPlan, Fault: fault, Want: 1, Seed: uint64(i)})
		})
	}
}

// The same, with a loop that runs each message's calls at once
// (adversary.ConcurrentLoop): copies of the booking race each other and
// the reworded ones.
func TestAnAdversarialModelOverTheWireGetsOneEffectPerActionWithCallsRunAtOnce(t *testing.T) {
	ex := adversary.WithLostRequests(example, 6)
	for i, fault := range []string{"lost-response", "none", "slow", adversary.LostRequest} {
		t.Run(fault, func(t *testing.T) {
			adversary.RunWire(t, ex, adversary.WireRun{Plan: bookingPlan, Fault: fault, Want: 1, Seed: uint64(10 + i), Concurrent: true})
		})
	}
}
