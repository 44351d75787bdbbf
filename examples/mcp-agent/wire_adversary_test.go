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
// and every envelope it reads is true; also with a loop that runs each
// message's calls at once (adversary.ConcurrentLoop), which sends them to
// the MCP server at once.
func TestAnAdversarialModelOverTheWireGetsOneEffectPerAction(t *testing.T) {
	for i, fault := range []string{"lost-response", "duplicate-delivery", "none", "unauthenticated"} {
		want := 1
		if fault == "unauthenticated" {
			want = 0 // nothing runs without a token
		}
		for _, concurrent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/at-once-%t", fault, concurrent), func(t *testing.T) {
				adversary.RunWire(t, example, adversary.WireRun{Plan: bookingPlan, Fault: fault, Want: want, Seed: uint64(60 + i), Concurrent: concurrent})
			})
		}
	}
}
