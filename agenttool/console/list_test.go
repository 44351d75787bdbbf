package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// The list shows what awaits a decision, unknown at-most-once actions
// first, each with its tool, reference, label and principal, age,
// attempts and the destination's last answer.
func TestListShowsActionsAwaitingDecision(t *testing.T) {
	w := newWorld(t, nil)
	email := w.lostEmail(ana, "Ana Lima") // the oldest: but reconcilable
	w.clock.advance(30 * time.Minute)
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)
	// A call that claimed a key and died: pending, its lease lapsed.
	dead := "send_email/dead0000000000000000000000000000"
	if _, err := w.store.Claim(context.Background(), storekit.ClaimRequest{Key: dead, Tool: "send_email",
		Owner: uuid.NewString(), Now: w.clock.Now(), Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	w.clock.advance(5 * time.Minute)
	settled := w.charge.Invoke(ctx(bob, "Bob Stone"), chargeBob) // succeeded: nothing to decide

	p := w.get("maria", "/")
	if p.status != http.StatusOK {
		t.Fatalf("list: %d\n%s", p.status, p.body)
	}
	got := text(p.body)
	order := []string{charge.RequestRef, email.RequestRef, dead}
	at := -1
	for _, ref := range order {
		i := strings.Index(got, ref)
		if i < at {
			t.Errorf("the list shows %s out of order; want %v:\n%s", ref, order, got)
		}
		at = i
	}
	for _, want := range []string{
		"Signed in as maria",
		"charge_card at-most-once " + charge.RequestRef + " unknown Ana Lima Ana Lima (tenant 1), conversation-1 5 min 1",
		"connection reset by peer", "The agent asked for a decision once.",
		"send_email reconcilable " + email.RequestRef + " unknown Ana Lima 35 min 1",
		dead + " pending, its holder stopped no label 5 min 1 none recorded",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the list does not show %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, settled.RequestRef) || strings.Contains(got, "Bob") {
		t.Errorf("the list shows a settled action:\n%s", got)
	}
	// A row links to the action's page.
	if !strings.Contains(p.body, `href="action?ref=`+strings.ReplaceAll(charge.RequestRef, "/", "%2f")+`"`) {
		t.Errorf("no link to %s:\n%s", charge.RequestRef, p.body)
	}
}

func TestListEmpty(t *testing.T) {
	w := newWorld(t, nil)
	p := w.get("maria", "/")
	if p.status != http.StatusOK || !strings.Contains(text(p.body), "Nothing awaits a decision.") {
		t.Errorf("empty list: %d\n%s", p.status, p.body)
	}
}

// The detail page shows one action and offers the decisions that can work
// for its tool.
func TestDetailOffersWhatCanWork(t *testing.T) {
	w := newWorld(t, nil)
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)
	email := w.lostEmail(ana, "Ana Lima")
	tests := []struct {
		ref        string
		show       []string
		offer, not []string
	}{
		{charge.RequestRef,
			[]string{"charge_card at-most-once", "State unknown", "Attempts 1", "Whose Ana Lima (tenant 1), conversation-1",
				"Last answer the outcome is unknown: read tcp 127.0.0.1:4242: connection reset by peer",
				"asked for a decision on this outcome once", "Decide on attempt 1"},
			[]string{"retry", "applied", "not-applied", "compensate"}, []string{"reconcile"}},
		{email.RequestRef,
			[]string{"send_email reconcilable", "State unknown", "Attempts 1", "Decide on attempt 1"},
			[]string{"reconcile", "applied", "not-applied"}, []string{"retry", "compensate"}},
	}
	for _, tt := range tests {
		p := w.get("maria", detailPath(tt.ref))
		if p.status != http.StatusOK {
			t.Fatalf("%s: %d\n%s", tt.ref, p.status, p.body)
		}
		got := text(p.body)
		for _, s := range tt.show {
			if !strings.Contains(got, s) {
				t.Errorf("%s: the page does not show %q:\n%s", tt.ref, s, got)
			}
		}
		for _, do := range tt.offer {
			if !strings.Contains(p.body, `<button type="submit" id="button-`+do+`"`) {
				t.Errorf("%s: no %s button", tt.ref, do)
			}
		}
		for _, do := range tt.not {
			if strings.Contains(p.body, `id="button-`+do+`"`) {
				t.Errorf("%s: a %s button, for a tool where it cannot work", tt.ref, do)
			}
		}
	}
	// A settled action has a page, and no decisions.
	done := w.charge.Invoke(ctx(bob, ""), chargeBob)
	p := w.get("maria", detailPath(done.RequestRef))
	if got := text(p.body); p.status != http.StatusOK || !strings.Contains(got, "State succeeded") ||
		!strings.Contains(got, "not awaiting a decision") || strings.Contains(p.body, "<form") {
		t.Errorf("a settled action's page: %d\n%s", p.status, got)
	}
	if p := w.get("maria", detailPath("charge_card/nosuchaction")); p.status != http.StatusNotFound {
		t.Errorf("an unknown reference: %d", p.status)
	}
}

// The detail page never claims a settlement that did not happen, whatever
// its done parameter says.
//
// The detail page prints the message of its "done" query parameter, as if
// a decision had just been made, whatever the record is: a link (or a
// reload of an old redirect) shows a settlement that did not happen.
func TestDetail_DoneParameterNeverClaimsASettlement(t *testing.T) {
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
