package console_test

import (
	"strings"
	"testing"
)

// The detail page prints the message of its "done" query parameter, as if
// a decision had just been made, whatever the record is: a link (or a
// reload of an old redirect) shows a settlement that did not happen.
func TestReview6_DoneParameterClaimsASettlement(t *testing.T) {
	w := newWorld(t, nil)
	env := w.lostCharge(ana, "Ana's order 77", chargeAna)
	p := w.get("maria", detailPath(env.RequestRef)+"&done=applied")
	if !w.awaiting(env.RequestRef) {
		t.Fatal("the charge is no longer unknown")
	}
	if body := text(p.body); strings.Contains(body, "Resolved as applied") {
		t.Errorf("the page of an unknown, unsettled charge says %q", "Resolved as applied: later calls for this action replay it as a success; nothing runs again.")
	}
}
