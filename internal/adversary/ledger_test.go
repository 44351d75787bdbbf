package adversary_test

import (
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/adversary"
)

func env(status envelope.Status, ref string, opts ...func(*envelope.Envelope)) envelope.Envelope {
	e := envelope.Envelope{Version: envelope.Version, Status: status, Tool: "send_email", RequestRef: ref, Attempts: 1, Next: envelope.Continue}
	switch status {
	case envelope.DefiniteFailure:
		e.Error, e.Next = &envelope.Error{Code: "smtp_550", Message: "no such mailbox"}, envelope.DoNotRetry
	case envelope.UnknownOutcome:
		e.Error, e.Next = &envelope.Error{Code: envelope.CodeOutcomeUnknown, Message: "EOF"}, envelope.DoNotRetry
	}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func replayed(e *envelope.Envelope) { e.Replayed = true }

func result(r string) func(*envelope.Envelope) {
	return func(e *envelope.Envelope) { e.Result = []byte(r) }
}

func earlier(ref string, s envelope.ActionState, code string) func(*envelope.Envelope) {
	return func(e *envelope.Envelope) {
		e.Earlier = &envelope.Earlier{RequestRef: ref, State: s}
		e.Error.Code = code
	}
}

// step is one group of envelopes and the effects counted after it.
type step struct {
	envs  []envelope.Envelope
	after int
}

// The ledger finds every way a run's envelopes can contradict the
// destination, and nothing in a truthful run.
func TestTheLedgerHoldsEnvelopesToTheDestination(t *testing.T) {
	A, B := "send_email/a", "send_email/b"
	for _, c := range []struct {
		name  string
		steps []step
		want  string // a part of the problem, or "" for none
	}{
		{"truthful", []step{
			{[]envelope.Envelope{env(envelope.Success, A)}, 1},
			{[]envelope.Envelope{env(envelope.Success, A, replayed)}, 1},
			{[]envelope.Envelope{env(envelope.DefiniteFailure, A, earlier(A, envelope.ActionSucceeded, envelope.CodeKeyReused))}, 1},
		}, ""},
		{"one message counted together", []step{
			{[]envelope.Envelope{env(envelope.DefiniteFailure, ""), env(envelope.Success, A)}, 1},
		}, ""},
		{"an unknown that landed, then settled", []step{
			{[]envelope.Envelope{env(envelope.UnknownOutcome, A)}, 0},
			{[]envelope.Envelope{env(envelope.UnknownOutcome, B, earlier(A, envelope.ActionUnknown, envelope.CodeEarlierUnknown))}, 1},
			{[]envelope.Envelope{env(envelope.DefiniteFailure, B, earlier(A, envelope.ActionSucceeded, envelope.CodeEarlierApplied))}, 1},
		}, ""},
		{"success without an effect", []step{
			{[]envelope.Envelope{env(envelope.Success, A)}, 0},
		}, "say 1 actions were applied, but the destination has 0"},
		{"a second effect after a replay", []step{
			{[]envelope.Envelope{env(envelope.Success, A)}, 1},
			{[]envelope.Envelope{env(envelope.Success, A, replayed)}, 2},
		}, "allow at most 1"},
		{"a refusal that applied something", []step{
			{[]envelope.Envelope{env(envelope.DefiniteFailure, A)}, 1},
		}, "allow at most 0"},
		{"a fresh success that applied nothing", []step{
			{[]envelope.Envelope{env(envelope.Success, A)}, 1},
			{[]envelope.Envelope{env(envelope.Success, B)}, 2},
			{[]envelope.Envelope{env(envelope.Success, "send_email/c")}, 2},
		}, "fresh successes, but the effects went from 2 to 2"},
		{"failed after it succeeded", []step{
			{[]envelope.Envelope{env(envelope.Success, A)}, 1},
			{[]envelope.Envelope{env(envelope.DefiniteFailure, B, earlier(A, envelope.ActionFailed, envelope.CodeKeyReused))}, 1},
		}, "after an envelope said it was applied"},
		{"an earlier action said done that is not", []step{
			{[]envelope.Envelope{env(envelope.UnknownOutcome, A)}, 0},
			{[]envelope.Envelope{env(envelope.DefiniteFailure, B, earlier(A, envelope.ActionSucceeded, envelope.CodeEarlierApplied))}, 0},
		}, "say 1 actions were applied, but the destination has 0"},
		{"a replay of nothing", []step{
			{[]envelope.Envelope{env(envelope.Success, A, replayed)}, 1},
		}, "the destination had no effect before this call"},
		{"another result for one action", []step{
			{[]envelope.Envelope{env(envelope.Success, A, result(`{"id":1}`))}, 1},
			{[]envelope.Envelope{env(envelope.Success, A, replayed, result(`{"id":2}`))}, 1},
		}, `with the result {"id":2}, after {"id":1}`},
		{"a tool that does not exist ran", []step{
			{[]envelope.Envelope{func() envelope.Envelope { e := env(envelope.Success, A); e.Tool = "send_mail"; return e }()}, 0},
		}, "does not exist did not fail"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := adversary.NewLedger("send_email")
			for _, s := range c.steps {
				for _, e := range s.envs {
					l.Read(e)
				}
				l.EndGroup(s.after)
			}
			got := strings.Join(l.Problems(), "\n")
			switch {
			case c.want == "" && got != "":
				t.Errorf("a truthful run: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Errorf("problems %q; want one with %q", got, c.want)
			}
		})
	}
}
