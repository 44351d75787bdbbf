package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// settled checks that a decision redirected to the action's page, and that
// the page says what the decision did.
func (w *world) settled(p page, ref, user, says string) {
	w.t.Helper()
	want := "action?" + url.Values{"ref": {ref}}.Encode() + "&done="
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, want) {
		w.t.Fatalf("decision answered %d, Location %q; want 303 to %s…\n%s", p.status, p.location, want, p.body)
	}
	after := w.get(user, "/"+p.location)
	if got := text(after.body); !strings.Contains(got, says) {
		w.t.Errorf("after the decision the page does not say %q:\n%s", says, got)
	}
}

// "Reconcile now" asks the destination: applied settles the action as a
// success that later calls replay; pending leaves it listed.
func TestReconcileNow(t *testing.T) {
	w := newWorld(t, nil)
	email := w.lostEmail(ana, "Ana Lima")

	p := w.decide("maria", email.RequestRef, "reconcile", 1, "the customer says it has not arrived")
	w.settled(p, email.RequestRef, "maria", "The destination answered pending: the action stays unknown.")
	if !strings.Contains(w.get("maria", "/").body, email.RequestRef) {
		t.Error("an action still unknown left the list")
	}

	w.verdict.Store(reconcile.AppliedWith([]byte(`{"message_id":"m-1"}`)))
	p = w.decide("maria", email.RequestRef, "reconcile", 1, "the mail server is back")
	w.settled(p, email.RequestRef, "maria", "The destination answered applied: the action is settled as a success.")
	rec := w.record(email.RequestRef)
	if rec.State != agenttool.Succeeded || rec.Resolution == nil || rec.Resolution.By != "operator:maria" {
		t.Errorf("after reconciling: %v, %+v", rec.State, rec.Resolution)
	}
	again := w.email.Invoke(ctx(ana, ""), emailAna)
	if again.Status != envelope.Success || !again.Replayed || w.emails.Load() != 1 {
		t.Errorf("the next call: %s, after %d emails; want the success replayed, one email", again, w.emails.Load())
	}
	if strings.Contains(w.get("maria", "/").body, email.RequestRef) {
		t.Error("a settled action is still listed")
	}
}

// "Resolve applied" with a result: later calls replay it; nothing runs.
func TestResolveApplied(t *testing.T) {
	w := newWorld(t, nil)
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)

	bad := w.decide("maria", charge.RequestRef, "applied", 1, "the processor shows ch_1", "result", `{"charge_id":`)
	if bad.status != http.StatusBadRequest || !strings.Contains(text(bad.body), "the result is not valid JSON") || !w.awaiting(charge.RequestRef) {
		t.Fatalf("a result that is not JSON: %d\n%s", bad.status, text(bad.body))
	}
	p := w.decide("maria", charge.RequestRef, "applied", 1, "the processor shows ch_1", "result", `{"charge_id":"ch_1"}`)
	w.settled(p, charge.RequestRef, "maria", "Resolved as applied")
	rec := w.record(charge.RequestRef)
	if rec.State != agenttool.Succeeded || rec.Resolution.By != "operator:maria" || rec.Resolution.Why != "the processor shows ch_1" {
		t.Errorf("resolved: %v, %+v", rec.State, rec.Resolution)
	}
	again := w.charge.Invoke(ctx(ana, ""), chargeAna)
	if again.Status != envelope.Success || string(again.Result) != `{"charge_id":"ch_1"}` || w.charges.Load() != 1 {
		t.Errorf("the next call: %s after %d charges; want the given result, one charge", again, w.charges.Load())
	}
}

// "Resolve not applied": the next call runs the tool once more.
func TestResolveNotApplied(t *testing.T) {
	w := newWorld(t, nil)
	email := w.lostEmail(ana, "Ana Lima")
	p := w.decide("maria", email.RequestRef, "not-applied", 1, "the mail server's log has no such message")
	w.settled(p, email.RequestRef, "maria", "Resolved as not applied")
	for range 2 {
		env := w.email.Invoke(ctx(ana, ""), emailAna)
		if env.Status != envelope.Success {
			t.Fatalf("after resolving not applied: %s", env)
		}
	}
	if n := w.emails.Load(); n != 2 {
		t.Errorf("%d emails reached the server; want 2 (the lost one, and one retry)", n)
	}
}

// The approver's round trip: an at-most-once call whose reply was lost
// asks the console's Approvals, the list shows it with the call's scope,
// a person approves one retry, and the next call runs the tool exactly
// once.
func TestApproveOneRetry(t *testing.T) {
	w := newWorld(t, nil)
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)
	if !strings.Contains(charge.Error.Message, "awaits a person's decision") {
		t.Errorf("the model is told: %s", charge)
	}
	w.charge.Invoke(ctx(ana, "Ana Lima"), chargeAna) // the agent asks once more
	list := text(w.get("maria", "/").body)
	if !strings.Contains(list, charge.RequestRef+" unknown Ana Lima Ana Lima (tenant 1), conversation-1") ||
		!strings.Contains(list, "The agent asked for a decision twice.") {
		t.Errorf("the list does not show the request:\n%s", list)
	}

	p := w.decide("maria", charge.RequestRef, "retry", 1, "the processor has no charge for this card today")
	w.settled(p, charge.RequestRef, "maria", "One retry approved: the next call for this action runs the tool exactly once")
	rec := w.record(charge.RequestRef)
	if !rec.RetryApproved || rec.Resolution.By != "operator:maria" || rec.Resolution.Why != "one retry approved: the processor has no charge for this card today" {
		t.Errorf("approved: %+v, %+v", rec.RetryApproved, rec.Resolution)
	}
	if strings.Contains(w.get("maria", "/").body, charge.RequestRef) {
		t.Error("an approved action is still listed as awaiting a decision")
	}
	before := w.charges.Load()
	first := w.charge.Invoke(ctx(ana, ""), chargeAna)
	second := w.charge.Invoke(ctx(ana, ""), chargeAna)
	if first.Status != envelope.Success || first.Replayed || second.Status != envelope.Success || !second.Replayed {
		t.Errorf("after the approval: %s, then %s; want a success, then its replay", first, second)
	}
	if n := w.charges.Load() - before; n != 1 {
		t.Errorf("the approval let the tool run %d times; want exactly once", n)
	}
	if n, ok := w.approvals.Asked(charge.RequestRef); ok {
		t.Errorf("Approvals still keeps the settled request (%d times)", n)
	}
}

// "Compensate" runs the tool's compensation once and closes the action.
func TestCompensate(t *testing.T) {
	w := newWorld(t, nil)
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)
	p := w.decide("maria", charge.RequestRef, "compensate", 1, "Ana cancelled the order")
	w.settled(p, charge.RequestRef, "maria", "Compensated")
	if !slices.Equal(w.refunded, []string{charge.RequestRef}) {
		t.Errorf("compensations: %v; want one, for %s", w.refunded, charge.RequestRef)
	}
	again := w.charge.Invoke(ctx(ana, ""), chargeAna)
	if again.Status != envelope.DefiniteFailure || w.charges.Load() != 1 {
		t.Errorf("the next call: %s after %d charges; want the definite failure, no new charge", again, w.charges.Load())
	}
}

// A decision needs a reason, and a decision the console knows; neither
// refused form changes anything.
func TestDecisionNeedsReason(t *testing.T) {
	w := newWorld(t, nil)
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)
	for _, tt := range []struct{ do, reason, says string }{
		{"retry", "  ", "say why"},
		{"retry", strings.Repeat("x", 2001), "say why"},
		{"delete", "because", "no decision this console knows"},
	} {
		p := w.decide("maria", charge.RequestRef, tt.do, 1, tt.reason)
		if p.status != http.StatusBadRequest || !strings.Contains(text(p.body), tt.says) {
			t.Errorf("do %q, reason %q: %d\n%s", tt.do, tt.reason, p.status, text(p.body))
		}
	}
	if !w.awaiting(charge.RequestRef) {
		t.Errorf("a refused decision changed the record: %+v", w.record(charge.RequestRef))
	}
}

// A decision about an outcome that is no longer the action's is refused,
// and changes nothing: the page showed attempt 1, and attempt 2 ran since.
func TestStaleDecisionChangesNothing(t *testing.T) {
	for _, do := range []string{"retry", "not-applied", "applied", "compensate"} {
		t.Run(do, func(t *testing.T) {
			w := newWorld(t, nil)
			charge := w.lostCharge(ana, "Ana Lima", chargeAna)
			token := w.token("maria", charge.RequestRef) // maria's page shows attempt 1

			// Meanwhile a colleague approves a retry, which runs and loses
			// its reply again: attempt 2 is unknown.
			if err := w.op.ResolveNotApplied(t.Context(), charge.RequestRef, 1, "li", "no charge found"); err != nil {
				t.Fatal(err)
			}
			w.loseReply.Store(true)
			w.charge.Invoke(ctx(ana, ""), chargeAna)
			if rec := w.record(charge.RequestRef); rec.Attempts != 2 || rec.State != agenttool.Unknown {
				t.Fatalf("the second attempt left %v at attempt %d", rec.State, rec.Attempts)
			}
			charges := w.charges.Load()

			p := w.do("maria", http.MethodPost, "/action", url.Values{"csrf": {token}, "ref": {charge.RequestRef}, "do": {do},
				"attempts": {"1"}, "reason": {"decided on what the page showed"}})
			got := text(p.body)
			if p.status != http.StatusConflict || !strings.Contains(got, "Nothing was changed: this decision was about attempt 1, and the action is now at attempt 2") {
				t.Errorf("stale %s: %d\n%s", do, p.status, got)
			}
			if !strings.Contains(got, "Decide on attempt 2") {
				t.Errorf("the refusal does not show the action as it now is:\n%s", got)
			}
			rec := w.record(charge.RequestRef)
			if rec.State != agenttool.Unknown || rec.RetryApproved || rec.Attempts != 2 || len(w.refunded) != 0 {
				t.Errorf("a stale %s changed the action: %v, approved %v, attempt %d, refunds %v", do, rec.State, rec.RetryApproved, rec.Attempts, w.refunded)
			}
			w.charge.Invoke(ctx(ana, ""), chargeAna)
			if w.charges.Load() != charges {
				t.Error("after a stale decision, the next call ran the tool")
			}
		})
	}
}

// A decision is checked against the action while the operator holds it,
// not only when the form arrives: attempt 2 ran after the console read the
// action for maria's decision about attempt 1 (a colleague on another
// replica approved a retry, and the agent's call ran it). Nothing is
// settled, and the page says so.
func TestDecisionRacingAnotherAttemptChangesNothing(t *testing.T) {
	for _, do := range []string{"retry", "not-applied", "applied", "compensate"} {
		t.Run(do, func(t *testing.T) {
			w := newWorld(t, nil)
			charge := w.lostCharge(ana, "Ana Lima", chargeAna)
			token := w.token("maria", charge.RequestRef) // maria's page shows attempt 1
			between := func() {
				if err := w.op.ResolveNotApplied(t.Context(), charge.RequestRef, 1, "li", "no charge found"); err != nil {
					t.Errorf("the colleague's approval: %v", err)
				}
				w.loseReply.Store(true)
				w.charge.Invoke(ctx(ana, ""), chargeAna)
			}
			w.store.between.Store(&between)

			p := w.do("maria", http.MethodPost, "/action", url.Values{"csrf": {token}, "ref": {charge.RequestRef}, "do": {do},
				"attempts": {"1"}, "reason": {"decided on what the page showed"}})
			got := text(p.body)
			if p.status != http.StatusConflict || !strings.Contains(got, "Nothing was changed: this decision was about attempt 1, and the action is now at attempt 2") {
				t.Errorf("%s racing attempt 2: %d\n%s", do, p.status, got)
			}
			rec := w.record(charge.RequestRef)
			if rec.State != agenttool.Unknown || rec.RetryApproved || rec.Attempts != 2 || len(w.refunded) != 0 || w.charges.Load() != 2 {
				t.Errorf("%s racing attempt 2 changed the action: %v, approved %v, attempt %d, refunds %v, charges %d",
					do, rec.State, rec.RetryApproved, rec.Attempts, w.refunded, w.charges.Load())
			}
		})
	}
}

// A decision about an action settled meanwhile is refused.
func TestDecisionAfterSettlement(t *testing.T) {
	w := newWorld(t, nil)
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)
	token := w.token("maria", charge.RequestRef)
	if err := w.op.ResolveApplied(t.Context(), charge.RequestRef, charge.Attempts, nil, "li", "seen at the processor"); err != nil {
		t.Fatal(err)
	}
	p := w.do("maria", http.MethodPost, "/action", url.Values{"csrf": {token}, "ref": {charge.RequestRef}, "do": {"retry"},
		"attempts": {"1"}, "reason": {"no charge found"}})
	if got := text(p.body); p.status != http.StatusConflict || !strings.Contains(got, "no longer awaiting a decision (it is succeeded)") {
		t.Errorf("a decision about a settled action: %d\n%s", p.status, got)
	}
	if rec := w.record(charge.RequestRef); rec.State != agenttool.Succeeded || rec.Resolution.By != "operator:li" {
		t.Errorf("the settled action changed: %v, %+v", rec.State, rec.Resolution)
	}
}

// A person deciding an action that went on in place of one found not
// applied sees that one, and is warned when a late answer found it
// applied after all: this action may be it reworded.
func TestDetailSaysWhatAnActionWentOnInPlaceOf(t *testing.T) {
	w := newWorld(t, nil)
	first := w.lostEmail(ana, "Ana Lima")
	w.decide("maria", first.RequestRef, "not-applied", 1, "the mail server's log has no such message")
	w.loseReply.Store(true)
	copy := w.email.Invoke(ctx(ana, ""), `{"to":"ana@example.com","body":"Lunch on Friday?"}`)
	if copy.Status != envelope.UnknownOutcome {
		t.Fatalf("the reworded email: %s; want unknown_outcome", copy)
	}
	if p := w.get("maria", detailPath(copy.RequestRef)); !strings.Contains(text(p.body), "In place of "+first.RequestRef) || strings.Contains(text(p.body), "after all") {
		t.Errorf("the page of the action in another's place does not name it:\n%s", text(p.body))
	}
	v, err := w.op.SettleByAnswer(context.Background(), first.RequestRef, 1, reconcile.AppliedWith([]byte(`{"message_id":"m-1"}`)), "late")
	if v != reconcile.Applied || !errors.Is(err, agenttool.ErrContradicted) {
		t.Fatalf("the late answer: %v, %v; want applied aside, for a person to look", v, err)
	}
	if p := w.get("maria", detailPath(copy.RequestRef)); !strings.Contains(text(p.body), "found applied after all") {
		t.Errorf("the page after the first was found applied does not warn:\n%s", text(p.body))
	}
	if p := w.get("bob", detailPath(copy.RequestRef)); p.status != http.StatusNotFound {
		t.Errorf("another tenant's viewer reads the page: %d", p.status)
	}
}

// threeWordings sends an email that goes unknown, then twice a reworded
// copy of it that goes on in its place (each found not applied by a
// person), and then a late answer finds the first applied after all. It
// returns the three.
func threeWordings(t *testing.T, w *world) (first, second, third envelope.Envelope) {
	t.Helper()
	first = w.lostEmail(ana, "Ana Lima")
	w.decide("maria", first.RequestRef, "not-applied", 1, "the mail server's log has no such message")
	w.loseReply.Store(true)
	second = w.email.Invoke(ctx(ana, ""), `{"to":"ana@example.com","body":"Lunch on Friday?"}`)
	if second.Status != envelope.UnknownOutcome {
		t.Fatalf("the reworded email: %s; want unknown_outcome", second)
	}
	w.decide("maria", second.RequestRef, "not-applied", 1, "not in the log either")
	w.loseReply.Store(true)
	third = w.email.Invoke(ctx(ana, ""), `{"to":"ana@example.com","body":"Are you free for lunch on Friday?"}`)
	if third.Status != envelope.UnknownOutcome {
		t.Fatalf("the email reworded again: %s; want unknown_outcome", third)
	}
	if _, err := w.op.SettleByAnswer(context.Background(), first.RequestRef, 1, reconcile.AppliedWith([]byte(`{"message_id":"m-1"}`)), "late"); !errors.Is(err, agenttool.ErrContradicted) {
		t.Fatalf("the late answer: %v; want applied aside, for a person to look", err)
	}
	return first, second, third
}

// The warning names the action found applied when it is not the one this
// action went on in place of but one before it: the page does not say
// that the write between them, which did nothing, was applied.
func TestDetailNamesTheActionAppliedBeforeTheOneItReplaced(t *testing.T) {
	w := newWorld(t, nil)
	first, second, third := threeWordings(t, w)
	body := text(w.get("maria", detailPath(third.RequestRef)).body)
	if !strings.Contains(body, "In place of "+second.RequestRef) || !strings.Contains(body, "and then an action before it, "+first.RequestRef+" , was found applied after all") {
		t.Errorf("the page of the third does not name the first as the action applied:\n%s", body)
	}
}

// A mark made by an earlier version names no action: the page says that
// the action replaced, or one before it, was found applied — never that
// the one replaced was, which no answer said. (Found by a review.)
func TestDetailDoesNotNameTheReplacedActionAsAppliedForAMarkOfAnEarlierVersion(t *testing.T) {
	w := newWorld(t, nil)
	_, second, third := threeWordings(t, w)
	recs, _, err := w.store.Store.Export(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		recs[i].StandsFor = "" // as the version before wrote them
	}
	legacy := memstore.New()
	if err := legacy.Import(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	w.store.Store = legacy
	body := text(w.get("maria", detailPath(third.RequestRef)).body)
	if strings.Contains(body, "found not applied — and then found applied after all") || !strings.Contains(body, "and then it, or an action before it, was found applied after all") {
		t.Errorf("the page of the third, marked by an earlier version, does not say that the second (%s) or one before it was found applied:\n%s", second.RequestRef, body)
	}
}

// A reworded copy that the notice of an action found done held back was
// never run: its page says so, and names that action, where it would
// otherwise call its outcome unreadable.
func TestDetailSaysWhatHeldAnActionBack(t *testing.T) {
	w := newWorld(t, nil)
	first := w.lostEmail(ana, "Ana Lima")
	w.decide("maria", first.RequestRef, "applied", 1, "in the mail server's log", "result", `{"message_id":"m-1"}`)
	held := w.email.Invoke(ctx(ana, ""), `{"to":"ana@example.com","body":"Lunch on Friday?"}`)
	if held.Error == nil || held.Error.Code != envelope.CodeEarlierApplied {
		t.Fatalf("the reworded email: %s; want earlier_action_applied", held)
	}
	body := text(w.get("maria", detailPath(held.RequestRef)).body)
	if !strings.Contains(body, "held back: not run") || !strings.Contains(body, first.RequestRef+", whose outcome was unknown, was found done") || strings.Contains(body, "unreadable") {
		t.Errorf("the page of the copy held back does not say what held it back:\n%s", body)
	}
}
