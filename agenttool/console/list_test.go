package console_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/retrysafe/retrysafe/agenttool/console"
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

// What a destination, a model or a person wrote is shown by the console,
// never obeyed: control characters (C0 and C1) and bidi overrides in an
// error text, a label, a resolver's name or a reason reach neither the
// pages, nor a plain answer, nor the audit log as they are; the pages show
// them as escapes.
func TestPagesShowControlCharactersInsteadOfObeyingThem(t *testing.T) {
	w := newWorld(t, nil)
	evil := "declined\u009b31m\u009d0;owned\u009c\x1b[2J\u202egnp.exe"
	w.lostWith.Store(&evil)
	charge := w.lostCharge(ana, "Ana \u202eLima", chargeAna)
	if err := w.op.ResolveNotApplied(t.Context(), charge.RequestRef, 1, "li\u009b2J", "no charge\u2066 found"); err != nil {
		t.Fatal(err)
	}
	w.loseReply.Store(true)
	w.charge.Invoke(ctx(ana, ""), chargeAna) // attempt 2: lost again, with the same text

	pages := map[string]page{
		"list":     w.get("maria", "/"),
		"detail":   w.get("maria", detailPath(charge.RequestRef)),
		"decision": w.decide("maria", charge.RequestRef, "compensate", 2, "customer \u009b2Jcancelled\u202e"),
		"plain":    w.get("maria", detailPath("charge_card/\u009b2Jnone")),
	}
	for name, p := range pages {
		if i, r := hiddenRune(p.body); i >= 0 {
			t.Errorf("the %s page carries %U at byte %d:\n%q", name, r, i, p.body)
		}
	}
	detail := text(pages["detail"].body)
	for _, want := range []string{`declined\u009b31m\u009d0;owned\u009c\u001b[2J\u202egnp.exe`, `Ana \u202eLima`, `li\u009b2J`, `no charge\u2066 found`} {
		if !strings.Contains(detail, want) {
			t.Errorf("the detail page does not show %q visibly:\n%s", want, detail)
		}
	}
	if !strings.Contains(text(pages["list"].body), `declined\u009b31m`) {
		t.Errorf("the list does not show the error visibly:\n%s", text(pages["list"].body))
	}
	log := w.log.String()
	if !strings.Contains(log, `customer \\u009b2Jcancelled\\u202e`) {
		t.Errorf("the audit log does not record the reason visibly:\n%s", log)
	}
	if i, r := hiddenRune(log); i >= 0 {
		t.Errorf("the audit log carries %U at byte %d:\n%q", r, i, log)
	}
}

// hiddenRune returns the first character of s that a terminal or a browser
// obeys rather than shows (C0 but tab and newline, DEL,
// C1, bidi formatting, line and paragraph separators, bytes that are not
// UTF-8), and its index; -1 if there is none.
func hiddenRune(s string) (int, rune) {
	for i, r := range s {
		switch {
		case r == '\t' || r == '\n':
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == utf8.RuneError,
			r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
			return i, r
		}
	}
	return -1, 0
}

// A viewer's name is what a person chose (a display name at the identity
// provider): the audit log records who decided through the same filter as
// everything else, so that a name with control characters (C0 and C1) or
// bidi overrides neither recolours nor reorders what the auditor reads.
func TestAuditLogShowsAViewersNameInsteadOfObeyingIt(t *testing.T) {
	w := newWorld(t, nil)
	charge := w.lostCharge(ana, "", chargeAna)
	name := "li\u009b2J\u009d0;owned\u009c\u202eanam"
	var log syncBuffer
	h, err := console.New(console.Options{
		Operator: w.op, Approvals: w.approvals,
		Who: func(*http.Request) (console.Viewer, error) {
			return console.Viewer{Name: name, All: true}, nil
		},
		Now: w.clock.Now, Logger: slog.New(slog.NewJSONHandler(&log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	w.srv = srv
	if p := w.decide("anyone", charge.RequestRef, "not-applied", 1, "no charge in the processor's log"); p.status != http.StatusSeeOther {
		t.Fatalf("the decision: %d\n%s", p.status, p.body)
	}
	if rec := w.record(charge.RequestRef); rec.Resolution == nil || !strings.Contains(rec.Resolution.By, "li\u009b2J") {
		t.Fatalf("the decision was not recorded as the viewer's: %+v", rec.Resolution)
	}
	got := log.String()
	if !strings.Contains(got, "no charge in the processor's log") {
		t.Fatalf("the audit log has no record of the decision:\n%s", got)
	}
	if i, r := hiddenRune(got); i >= 0 {
		t.Errorf("the audit log carries %U at byte %d:\n%q", r, i, got)
	}
}
