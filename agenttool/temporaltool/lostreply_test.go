package temporaltool_test

import (
	"fmt"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
)

// An activity whose attempt takes the order and dies before its outcome
// is recorded (the reply is lost with the worker) is retried by Temporal's
// retry policy under the same key: the ledger takes one order, and the
// workflow hears what the key's class can prove — a Keyed tool's retry is
// answered by the ledger with the first order (success, replayed), a
// Reconcilable tool's asks the ledger (success, reconciled), an
// AtMostOnce tool's may not act again (unknown_outcome, ask a person).
// The store is durable (boltstore), and the attempts are counted: the
// workflow's answer comes from Temporal's retry, not the first attempt.
func TestLostReplyIsOneEffect(t *testing.T) {
	for _, tc := range []struct {
		class      agenttool.Class
		status     envelope.Status
		replayed   bool
		reconciled bool
	}{
		{agenttool.Keyed, envelope.Success, true, false},
		{agenttool.Reconcilable, envelope.Success, false, true},
		{agenttool.AtMostOnce, envelope.UnknownOutcome, true, false}, // replayed: the earlier attempt's state
	} {
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%v/%s", tc.class, mode), func(t *testing.T) {
				t.Parallel()
				l := newLedger(tc.class == agenttool.Keyed)
				l.crash = 1
				o := l.options(tc.class, boltStore(t))
				n := starts(&o)
				a := mustActivity(t, l.tool(t, o))
				envs := run(t, newEnv(t, a), calls(a), []temporaltool.Call{call(tea, mode)})

				env := envs[0]
				want(t, env, tc.status, "")
				if env.Replayed != tc.replayed || env.Reconciled != tc.reconciled {
					t.Errorf("replayed %v, reconciled %v; want %v, %v", env.Replayed, env.Reconciled, tc.replayed, tc.reconciled)
				}
				if tc.class == agenttool.AtMostOnce && env.Next != envelope.AskHuman {
					t.Errorf("next %s, want ask_human", env.Next)
				}
				if got := n.Load(); got < 2 {
					t.Errorf("the tool was called %d times: Temporal did not retry the lost attempt", got)
				}
				l.check(t, 1)
			})
		}
	}
}
