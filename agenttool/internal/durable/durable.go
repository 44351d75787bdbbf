// Package durable holds what the durable-engine adapters (dbostool,
// temporaltool) decide alike.
package durable

import "github.com/retrysafe/retrysafe/envelope"

// StepAdvice makes an unknown outcome's advice true of a call keyed by its
// step (ByStep): the tool's "calling again later with the same input is
// safe" (a Keyed tool's, and in_progress's) holds for the same action, and
// a call in another step is another action, which would act again. Only
// the same step called again (Call.Step) learns what became of it.
func StepAdvice(env envelope.Envelope) envelope.Envelope {
	if env.Status != envelope.UnknownOutcome || env.Next != envelope.Wait {
		return env
	}
	env.Next = envelope.DoNotRetry
	env.Note = "The outcome of this step's action is not known yet (reference " + env.RequestRef + "). Do not call " + env.Tool +
		" again for it as a new step: that is another action, and would act again. Calling the same step again (Call.Step) learns what became of it."
	return env
}
