package agenttool_test

import (
	"context"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// Regression (I9, at-most-once, no reconciler): after an operator settles A as
// not applied, B (A reworded) runs and ends unknown; A sent again runs
// although B is unknown in the same session: the fence is skipped for a
// record approved for a retry.
func TestI9_AnOperatorsApprovalWaitsForTheFence(t *testing.T) {
	store := memstore.New()
	m := &mailServer{script: func(n int) (bool, error) {
		switch n {
		case 1:
			return false, errLostReply // A: not delivered, reply lost
		case 2:
			return true, errLostReply // B: delivered, reply lost
		}
		return true, nil
	}}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	a := tool.Invoke(scoped(), lunch)
	mustStatus(t, a, envelope.UnknownOutcome)
	if err := op.ResolveNotApplied(context.Background(), a.RequestRef, a.Attempts, "maria", "not in the provider's log"); err != nil {
		t.Fatal(err)
	}
	b := tool.Invoke(scoped(), lunchReworded)
	mustStatus(t, b, envelope.UnknownOutcome) // B may have gone out: the session's fence is up
	held := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Shall we meet at noon? Sam"}`)
	t.Logf("another reword while B is unknown: %s", held.Error.Code) // earlier_action_unknown: the fence works for new keys
	again := tool.Invoke(scoped(), lunch)
	t.Logf("A again while B is unknown: %s", again)
	if m.count() > 1 {
		t.Fatalf("%d emails for one logical action; A re-ran while B (%s) was unknown", m.count(), b.RequestRef)
	}
}
