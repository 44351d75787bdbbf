package adaptertest

import (
	"github.com/retrysafe/retrysafe/agenttool/modeltest"
	"github.com/retrysafe/retrysafe/internal/adversary"
)

// Plan is send_email's action as the adversarial model restates it
// (package adversary): repeats, re-cased names and values, null members,
// cosmetic variants, partial and malformed input, keys of its own, nested
// and disguised.
var Plan = adversary.Plan{Tool: "send_email", Base: Base, Reworded: Reworded}

// AdversaryTurns are the messages of an adversarial model against
// send_email: first one message with every restatement of the action at
// once, as parallel tool calls, and a call of a tool that does not exist;
// then, whatever it read, a message with the reworded copy, the resend,
// a reworded copy that carries its own key and one that pastes a
// reference back.
func AdversaryTurns() []modeltest.Reply {
	var first []modeltest.Call
	for _, v := range Plan.Variants() {
		first = append(first, modeltest.Call{Name: "send_email", Arguments: v})
	}
	first = append(first, modeltest.Call{Name: "send_mail", Arguments: Base}, modeltest.Call{Name: "SEND_EMAIL", Arguments: Base})
	second := []modeltest.Call{
		{Name: "send_email", Arguments: Reworded},
		{Name: "send_email", Arguments: Base},
		{Name: "send_email", Arguments: `{"to":"ana@example.com","subject":"Invoice 42 (resent)","body":"Hello again","request_id":"r-2"}`},
		{Name: "send_email", Arguments: `{"to":"ana@example.com","subject":"Invoice 42","body":"Hi Ana, the invoice is attached.","meta":{"Idempotency_Key":"x"}}`},
	}
	return []modeltest.Reply{modeltest.Calls(first...), modeltest.Calls(second...)}
}
