package console_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/console"
)

// Approvals answers Undecided, counts the requests about one outcome anew
// when the outcome changes, and remembers a bounded number of actions,
// forgetting the one asked about least recently.
func TestApprovalsRemembersRequests(t *testing.T) {
	var a console.Approvals
	ask := func(ref string, attempts int) {
		t.Helper()
		got, err := a.Approve(context.Background(), agenttool.ApprovalRequest{Tool: "charge_card", RequestRef: ref, Attempts: attempts,
			Scope: agenttool.Scope{Principal: ana, Session: "s"}})
		if err != nil || got.Decision != agenttool.Undecided {
			t.Fatalf("Approve: %+v, %v; want Undecided", got, err)
		}
	}
	ask("charge_card/a", 1)
	ask("charge_card/a", 1)
	if n, ok := a.Asked("charge_card/a"); !ok || n != 2 {
		t.Errorf("asked twice about attempt 1: %d, %v", n, ok)
	}
	ask("charge_card/a", 2)
	if n, _ := a.Asked("charge_card/a"); n != 1 {
		t.Errorf("asked once about attempt 2: counted %d", n)
	}
	for i := range 1000 {
		ask(fmt.Sprintf("charge_card/%04d", i), 1)
	}
	if _, ok := a.Asked("charge_card/a"); ok {
		t.Error("the action asked about least recently is still kept past 1,000 actions")
	}
	if _, ok := a.Asked("charge_card/0000"); !ok {
		t.Error("a recent action was forgotten")
	}
	ask("charge_card/0000", 1) // asked again: now the most recent
	ask("charge_card/b", 1)
	if _, ok := a.Asked("charge_card/0000"); !ok {
		t.Error("an action asked about again was forgotten")
	}
	if _, ok := a.Asked("charge_card/0001"); ok {
		t.Error("the least recent action was kept")
	}
}
