package main

import (
	"fmt"
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

// An adversarial model over the OpenAI wire format — parallel and repeated
// calls, restated and reworded emails, malformed arguments, pasted
// references, tools that do not exist — sends no second email under any
// fault (and none where the server refuses it), and every envelope it
// reads is true. Where the first send's outcome is unknown, the model also
// sends a reworded copy in its first message, before it has read
// anything.
func TestAnAdversarialModelOverTheWireGetsOneEffectPerAction(t *testing.T) {
	for i, c := range []struct {
		fault        string
		want         int
		rewordAtOnce bool
	}{
		{"lost-ack", 1, false}, {"lost-ack", 1, true},
		{"none", 1, false},
		{"bad-recipient", 0, false},
		{"reword", 1, false}, {"reword", 1, true},
		{"index-down", 1, false}, {"index-down", 1, true},
	} {
		t.Run(fmt.Sprintf("%s/reword-at-once-%t", c.fault, c.rewordAtOnce), func(t *testing.T) {
			adversary.RunWire(t, example, adversary.WireRun{Plan: emailPlan, Fault: c.fault, Want: c.want, Seed: uint64(i), RewordAtOnce: c.rewordAtOnce})
		})
	}
}

// The same, with a loop that runs each message's calls at once
// (adversary.ConcurrentLoop): after the unknown outcome, the resend and
// the reworded copies race for the tool.
func TestAnAdversarialModelOverTheWireGetsOneEffectPerActionWithCallsRunAtOnce(t *testing.T) {
	for i, c := range []struct {
		fault string
		want  int
	}{{"lost-ack", 1}, {"none", 1}, {"bad-recipient", 0}, {"index-down", 1}} {
		t.Run(c.fault, func(t *testing.T) {
			adversary.RunWire(t, example, adversary.WireRun{Plan: emailPlan, Fault: c.fault, Want: c.want, Seed: uint64(40 + i), Concurrent: true})
		})
	}
}
