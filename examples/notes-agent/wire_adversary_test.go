package main

import (
	"fmt"
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

// An adversarial model over the OpenAI wire format — parallel and repeated
// calls, restated and reworded notes, malformed arguments, pasted
// references, tools that do not exist — appends one note (none to a closed
// incident), and every envelope it reads is true; also with a loop that
// runs each message's calls at once (adversary.ConcurrentLoop).
func TestAnAdversarialModelOverTheWireGetsOneEffectPerAction(t *testing.T) {
	for i, fault := range []string{"none", "closed-incident"} {
		want := map[string]int{"none": 1, "closed-incident": 0}[fault]
		for _, concurrent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/at-once-%t", fault, concurrent), func(t *testing.T) {
				adversary.RunWire(t, example, adversary.WireRun{Plan: notesPlan, Fault: fault, Want: want, Seed: uint64(50 + i), Concurrent: concurrent})
			})
		}
	}
}
