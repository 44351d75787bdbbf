package agenttool_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

type invoiceInput struct {
	Customer string `json:"customer"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
	Memo     string `json:"memo"`
}

// invoiceAPI creates invoices and honours the request reference as an
// idempotency key; its first reply is lost.
type invoiceAPI struct {
	mu       sync.Mutex
	invoices map[string]bool
	lost     bool
}

func (a *invoiceAPI) create(ctx context.Context, in invoiceInput) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ref := agenttool.RequestRef(ctx)
	a.invoices[ref] = true
	if !a.lost {
		a.lost = true
		return "", errLostReply
	}
	return "inv-" + ref, nil
}

// Two replicas that build one tool differently — a rolling deploy that
// narrows IdentifyingFields — give one request two references. While the
// first replica's action is unknown, the second's identical request is
// held as the fence holds any new write, and its answer names both
// definitions: one invoice, never a silent second one.
func TestTwoDefinitionsOfOneToolMakeOneInvoiceAndSayWhy(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		api := &invoiceAPI{invoices: map[string]bool{}}
		build := func(fields ...string) *agenttool.Tool {
			tool, err := agenttool.New("create_invoice", "Create an invoice.", api.create, agenttool.Options{
				Store: store, Class: agenttool.Keyed, IdentifyingFields: fields, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
			if err != nil {
				t.Fatal(err)
			}
			return tool
		}
		a := build() // every field identifies an invoice
		b := build("customer", "amount", "currency")
		const in = `{"customer":"acme","amount":1200,"currency":"EUR","memo":"November"}`
		first := a.Invoke(scoped(), in)
		mustStatus(t, first, envelope.UnknownOutcome)
		held := b.Invoke(scoped(), in)
		mustStatus(t, held, envelope.UnknownOutcome)
		if held.RequestRef == first.RequestRef {
			t.Fatal("the two definitions made one reference: the test does not reach what it tests")
		}
		if ref, _ := held.UnknownRef(); ref != first.RequestRef || held.Error.Code != envelope.CodeEarlierUnknown ||
			!strings.Contains(held.Error.Message, "another definition of create_invoice") ||
			!strings.Contains(held.Error.Message, "identifying amount, currency, customer") {
			t.Errorf("the second definition's identical request: %s; want it held, naming both definitions", held)
		}
		t.Logf("held: %s", held)
		if n := len(api.invoices); n != 1 {
			t.Errorf("%d invoices; want 1", n)
		}
		// The first replica's resend settles the action; a deliberate
		// redeploy goes on once it is settled.
		mustStatus(t, a.Invoke(scoped(), in), envelope.Success)
		if n := len(api.invoices); n != 1 {
			t.Errorf("%d invoices after the resend; want 1", n)
		}
	})
}

// An action of a tool made under another definition holds a call back
// while it runs, also when the new definition fences by session where the
// old one fenced by principal: a claim fenced by session reads the
// records beside its slot.
//
// Replica A builds create_invoice fenced by principal; replica B, the new
// version, narrows IdentifyingFields and fences by session (the default).
// A's call for the November invoice is running (a slow API); B's
// identical request has another reference, and is held: one invoice.
// (The reverse change, from session to principal, is not seen while the
// old action runs: a claim fenced by principal reads its principal's
// slot, and the old action holds its session's. docs/stores.md says to
// roll such a change out as a drain.)
func TestTwoDefinitionsOfOneToolMakeOneInvoice_WhenTheFenceChangesToSession(t *testing.T) {
	for _, order := range []struct {
		name   string
		aFence agenttool.FenceScope
		bFence agenttool.FenceScope
	}{
		{"principal then session", agenttool.FencePrincipal, agenttool.FenceSession},
	} {
		t.Run(order.name, func(t *testing.T) {
			storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
				store := open()
				var mu sync.Mutex
				invoices := map[string]bool{}
				started, release := make(chan struct{}), make(chan struct{})
				var once sync.Once
				create := func(ctx context.Context, in invoiceInput) (string, error) {
					mu.Lock()
					invoices[agenttool.RequestRef(ctx)] = true
					mu.Unlock()
					first := false
					once.Do(func() { first = true })
					if first {
						close(started)
						<-release // a slow API
					}
					return "inv-" + agenttool.RequestRef(ctx), nil
				}
				build := func(fence agenttool.FenceScope, fields ...string) *agenttool.Tool {
					tool, err := agenttool.New("create_invoice", "Create an invoice.", create, agenttool.Options{
						Store: store, Class: agenttool.Keyed, Fence: fence, IdentifyingFields: fields, WaitTimeout: 50 * time.Millisecond,
						Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
					if err != nil {
						t.Fatal(err)
					}
					return tool
				}
				a := build(order.aFence)
				b := build(order.bFence, "customer", "amount", "currency")
				const in = `{"customer":"acme","amount":1200,"currency":"EUR","memo":"November"}`
				done := make(chan envelope.Envelope, 1)
				go func() { done <- a.Invoke(scoped(), in) }()
				<-started
				second := b.Invoke(scoped(), in)
				close(release)
				first := <-done
				t.Logf("replica A: %s", first)
				t.Logf("replica B: %s", second)
				if second.RequestRef == first.RequestRef {
					t.Fatal("the two definitions made one reference: the test does not reach what it tests")
				}
				if second.Status == envelope.Success {
					t.Errorf("replica B's identical request ran while replica A's, made under another definition, was running: %s", second)
				}
				if n := len(invoices); n != 1 {
					t.Errorf("%d invoices; want 1", n)
				}
			})
		})
	}
}

// keyedInvoices honours an idempotency key where and as the tool is
// built to send it (sentAs): in a header or a body field, the reference
// or its UUID form. Its first reply is lost.
type keyedInvoices struct {
	mu    sync.Mutex
	keys  map[string]bool // the keys it has created an invoice under
	calls int
}

const (
	inHeader     = "Idempotency-Key header, the reference"
	inHeaderUUID = "Idempotency-Key header, its UUID form"
	inBody       = "body field idempotency_key, the reference"
)

func (a *keyedInvoices) tool(t *testing.T, store agenttool.Store, class agenttool.Class, sentAs string, r reconcile.Reconciler) *agenttool.Tool {
	tool, err := agenttool.New("create_invoice", "Create an invoice.", func(ctx context.Context, in invoiceInput) (string, error) {
		key := agenttool.RequestRef(ctx)
		switch sentAs {
		case inHeaderUUID:
			key = agenttool.RefUUID(key)
		case inBody:
			key = "body:" + key
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.calls++
		a.keys[key] = true
		if a.calls == 1 {
			return "", errLostReply
		}
		return "inv-" + key, nil
	}, agenttool.Options{Store: store, Class: class, RefSentAs: sentAs, Reconciler: r, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func (a *keyedInvoices) created() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.keys)
}

// A keyed action is resent only as it was sent: after a deploy that sends
// the key in another form or another place, the destination would meet a
// key it never saw and create a second invoice. The new
// definition neither resends nor checks the action left unknown: the call
// answers unknown, ask_human, naming both definitions; an operator (or a
// replica of the old definition) settles it, and the new one goes on.
func TestAnUnknownActionIsResentOnlyAsItWasSent(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		api := &keyedInvoices{keys: map[string]bool{}}
		const in = `{"customer":"acme","amount":1200,"currency":"EUR","memo":"November"}`
		first := api.tool(t, store, agenttool.Keyed, inHeader, nil).Invoke(scoped(), in)
		mustStatus(t, first, envelope.UnknownOutcome)

		for _, changed := range []struct {
			name   string
			class  agenttool.Class
			sentAs string
		}{{"the key's form", agenttool.Keyed, inHeaderUUID}, {"the key's place", agenttool.Keyed, inBody}, {"the key's place and the class", agenttool.Reconcilable, inBody}} {
			checks := &countingReconciler{}
			again := api.tool(t, store, changed.class, changed.sentAs, checks).Invoke(scoped(), in)
			if again.Status != envelope.UnknownOutcome || again.Next != envelope.AskHuman || again.RequestRef != first.RequestRef ||
				!strings.Contains(again.Error.Message, "handed the destination the reference another way") {
				t.Errorf("%s changed, the same request: %s; want unknown, ask_human, naming the other definition", changed.name, again)
			}
			if n := checks.count(); n != 0 {
				t.Errorf("%s changed: the new definition's reconciler was asked %d times about the old one's action", changed.name, n)
			}
		}
		if n := api.created(); n != 1 {
			t.Fatalf("%d invoices; want 1", n)
		}
		// Its own definition resends it under the key the destination knows.
		if again := api.tool(t, store, agenttool.Keyed, inHeader, nil).Invoke(scoped(), in); again.Status != envelope.Success {
			t.Errorf("the resend under the action's own definition: %s; want success", again)
		}
		if n := api.created(); n != 1 {
			t.Errorf("%d invoices after the resend; want 1", n)
		}
	})
}

// countingReconciler answers not applied, and counts the checks.
type countingReconciler struct{ n atomic.Int64 }

func (c *countingReconciler) Check(context.Context, reconcile.Request) reconcile.Answer {
	c.n.Add(1)
	return reconcile.NotAppliedYet()
}

func (c *countingReconciler) count() int64 { return c.n.Load() }

// Nothing asks about an action with another definition's reconciler:
// checked the new way (a status API asked for the reference's UUID form
// where the action sent the reference) it would read not applied, and the
// next call would run it again. The sweeper skips it, an operator's
// reconcile refuses it (ErrOtherDefinition), and the fence holds the
// scope's new writes for a person; a person's decision settles it.
func TestAnUnknownActionIsCheckedOnlyAsItWasSent(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		api := &keyedInvoices{keys: map[string]bool{}}
		const in = `{"customer":"acme","amount":1200,"currency":"EUR","memo":"November"}`
		first := api.tool(t, store, agenttool.Reconcilable, inHeader, &countingReconciler{}).Invoke(scoped(), in)
		mustStatus(t, first, envelope.UnknownOutcome)

		checks := &countingReconciler{}
		changed := api.tool(t, store, agenttool.Reconcilable, inHeaderUUID, checks)
		op, err := agenttool.NewOperator(store, changed)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
		if err != nil || rep.Skipped != 1 || rep.Checked != 0 {
			t.Errorf("a sweep by the new definition: %+v, %v; want the action skipped", rep, err)
		}
		if v, err := op.Reconcile(context.Background(), first.RequestRef, "maria"); !errors.Is(err, agenttool.ErrSentOtherwise) || v != reconcile.CantSay {
			t.Errorf("an operator's reconcile under the new definition: %v, %v; want ErrSentOtherwise", v, err)
		}
		const december = `{"customer":"acme","amount":900,"currency":"EUR","memo":"December"}`
		held := changed.Invoke(scoped(), december)
		if held.Error == nil || held.Error.Code != envelope.CodeEarlierUnknown || !strings.Contains(held.Note, "a person must settle it") {
			t.Errorf("a new write of the scope under the new definition: %s; want it held for a person", held)
		}
		if n := checks.count(); n != 0 {
			t.Errorf("the new definition's reconciler was asked %d times about the old one's action", n)
		}
		if rec, err := store.Get(context.Background(), first.RequestRef); err != nil || rec.State != agenttool.Unknown {
			t.Errorf("the action after all that: %+v, %v; want it unknown", rec, err)
		}
		// A person who checked settles it; the new definition goes on.
		if err := op.ResolveApplied(context.Background(), first.RequestRef, 1, nil, "maria", "invoice found in the ledger"); err != nil {
			t.Fatal(err)
		}
		if n := api.created(); n != 1 {
			t.Errorf("%d invoices; want 1", n)
		}
	})
}

// scriptedInvoices honours an idempotency key as each tool built by it
// sends it (sentAs, as keyedInvoices). Its replies follow a script, one
// entry per request it is sent: "lost before" (the request never reached
// it), "lost after" (it created the invoice, and the reply was lost), or
// "" (it answers).
type scriptedInvoices struct {
	mu     sync.Mutex
	keys   map[string]bool
	script []string
}

func (a *scriptedInvoices) tool(t *testing.T, store agenttool.Store, sentAs string) *agenttool.Tool {
	tool, err := agenttool.New("create_invoice", "Create an invoice.", func(ctx context.Context, in invoiceInput) (string, error) {
		key := agenttool.RequestRef(ctx)
		switch sentAs {
		case inHeaderUUID:
			key = agenttool.RefUUID(key)
		case inBody:
			key = "body:" + key
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		step := ""
		if len(a.script) > 0 {
			step, a.script = a.script[0], a.script[1:]
		}
		if step == "lost before" {
			return "", errLostReply
		}
		a.keys[key] = true
		if step == "lost after" {
			return "", errLostReply
		}
		return "inv-" + key, nil
	}, agenttool.Options{Store: store, Class: agenttool.Keyed, RefSentAs: sentAs, Retry: agenttool.RetryPolicy{MaxAttempts: 1}, ClockSkew: -1})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func (a *scriptedInvoices) created() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.keys)
}

// An action is resent as its latest attempt was sent, whichever
// definition of the tool made the action. A person found the first
// attempt (sent by an old replica, the key in the header) not applied; a
// replica of the new definition (the key's UUID form) took the approved
// retry, and its reply was lost. That attempt is what the destination may
// have done, under the UUID form: an old replica must not resend it with
// the key in the old form — a second invoice — and the new one, which
// sent it, resends it as it sent it, and settles it.
func TestAnUnknownActionIsResentOnlyAsItWasSent_AfterAnApprovedRetry(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		api := &scriptedInvoices{keys: map[string]bool{}, script: []string{"lost before", "lost after"}}
		const in = `{"customer":"acme","amount":1200,"currency":"EUR","memo":"November"}`
		old, changed := api.tool(t, store, inHeader), api.tool(t, store, inHeaderUUID)
		first := old.Invoke(scoped(), in)
		mustStatus(t, first, envelope.UnknownOutcome)
		op, err := agenttool.NewOperator(store, old)
		if err != nil {
			t.Fatal(err)
		}
		if err := op.ResolveNotApplied(context.Background(), first.RequestRef, 1, "maria", "not in the ledger"); err != nil {
			t.Fatal(err)
		}
		retried := changed.Invoke(scoped(), in)
		mustStatus(t, retried, envelope.UnknownOutcome)
		if n := api.created(); n != 1 {
			t.Fatalf("%d invoices after the approved retry; want 1", n)
		}

		again := old.Invoke(scoped(), in)
		if n := api.created(); n != 1 {
			t.Errorf("%d invoices after the old definition's call (%s); want 1: it resent the action in a form its last attempt was not sent in", n, again)
		}
		if again.Status != envelope.UnknownOutcome || again.Next != envelope.AskHuman {
			t.Errorf("the old definition's call: %s; want unknown, ask_human", again)
		}
		if settled := changed.Invoke(scoped(), in); settled.Status != envelope.Success {
			t.Errorf("the resend by the definition that sent the last attempt: %s; want success", settled)
		}
		if n := api.created(); n != 1 {
			t.Errorf("%d invoices; want 1", n)
		}
	})
}

// bookings keeps bookings by the client reference each tool built by it
// sends (sentAs); a cancellation by a reference it does not hold finds
// nothing, and succeeds, as a compensation must. Its first reply is lost.
type bookings struct {
	mu     sync.Mutex
	live   map[string]bool
	calls  int
	undone int
}

func (b *bookings) ref(ctx context.Context, ref, sentAs string) string {
	if sentAs == inHeaderUUID {
		return agenttool.RefUUID(ref)
	}
	return ref
}

func (b *bookings) tool(t *testing.T, store agenttool.Store, sentAs string, approver agenttool.Approver) *agenttool.Tool {
	tool, err := agenttool.New("book_flight", "Book a flight.", func(ctx context.Context, in invoiceInput) (string, error) {
		key := b.ref(ctx, agenttool.RequestRef(ctx), sentAs)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.calls++
		b.live[key] = true
		if b.calls == 1 {
			return "", errLostReply
		}
		return "booked " + key, nil
	}, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, RefSentAs: sentAs, Approver: approver, ClockSkew: -1,
		Compensate: func(ctx context.Context, info agenttool.CallInfo) error {
			key := b.ref(ctx, info.RequestRef, sentAs)
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.live[key] {
				delete(b.live, key)
				b.undone++
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func (b *bookings) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.live)
}

// A compensation finds the action it undoes by its reference, as a check
// does: run by a definition that hands the destination the reference
// otherwise, it would find nothing to cancel, succeed, and the action be
// answered "undone" while the booking stands — and the user, told so,
// book again. Neither the approver's decision to compensate nor an
// operator's compensation runs another definition's compensation of it:
// the action stays unknown, for a person.
func TestAnUnknownActionIsCompensatedOnlyAsItWasSent(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		api := &bookings{live: map[string]bool{}}
		const in = `{"customer":"ana","amount":1,"currency":"EUR","memo":"TP1235"}`
		first := api.tool(t, store, inHeader, nil).Invoke(scoped(), in)
		mustStatus(t, first, envelope.UnknownOutcome)

		compensate := agenttool.ApproverFunc(func(_ context.Context, req agenttool.ApprovalRequest) (agenttool.Approval, error) {
			return agenttool.Approval{Decision: agenttool.Compensate, By: "maria", Reason: "cancel it", Attempts: req.Attempts}, nil
		})
		changed := api.tool(t, store, inHeaderUUID, compensate)
		again := changed.Invoke(scoped(), in)
		if api.count() != 1 || again.Status != envelope.UnknownOutcome || again.Next != envelope.AskHuman {
			t.Errorf("the approver's compensation under another definition: %s, %d bookings standing; want unknown, ask_human, the booking standing and not called undone", again, api.count())
		}
		op, err := agenttool.NewOperator(store, changed)
		if err != nil {
			t.Fatal(err)
		}
		if err := op.Compensate(context.Background(), first.RequestRef, 1, "maria", "cancel it"); !errors.Is(err, agenttool.ErrSentOtherwise) {
			t.Errorf("an operator's compensation under another definition: %v; want ErrSentOtherwise", err)
		}
		if rec, err := store.Get(context.Background(), first.RequestRef); err != nil || rec.State != agenttool.Unknown || rec.Resolution != nil {
			t.Errorf("the action after the compensations refused: %+v, %v; want it unknown, unresolved", rec, err)
		}
		// Its own definition's compensation finds it, and undoes it.
		op, err = agenttool.NewOperator(store, api.tool(t, store, inHeader, nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := op.Compensate(context.Background(), first.RequestRef, 1, "maria", "cancel it"); err != nil {
			t.Fatal(err)
		}
		if n := api.count(); n != 0 {
			t.Errorf("%d bookings standing after the compensation as it was sent; want 0", n)
		}
	})
}

// onGet runs a function, once, when a key is read: what another replica
// does between a claim's read of an action and the fence's takeover.
type onGet struct {
	agenttool.Store
	key  string
	then atomic.Pointer[func()]
}

func (s *onGet) Get(ctx context.Context, key string) (agenttool.Record, error) {
	if key == s.key {
		if f := s.then.Swap(nil); f != nil {
			(*f)()
		}
	}
	return s.Store.Get(ctx, key)
}

// The fence checks an earlier action of the scope only as its latest
// attempt was sent, as the record says when the fence holds it, not as it
// was when the claim saw it. Between the two, a person found the earlier
// action's first attempt not applied, and a replica of another definition
// (the reference's UUID form) took the approved retry, whose outcome is
// unknown: the fence's check by the old form would read not applied, and
// close the booking made as not done, replaced by the new write.
func TestAnUnknownActionIsCheckedOnlyAsItWasSent_WhenItChangesUnderTheFence(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		base := open()
		var mu sync.Mutex
		live, script := map[string]bool{}, []string{"lost before", "lost after"}
		form := func(ref, sentAs string) string {
			if sentAs == inHeaderUUID {
				return agenttool.RefUUID(ref)
			}
			return ref
		}
		build := func(store agenttool.Store, sentAs string, down bool) *agenttool.Tool {
			check := reconcile.RequestFunc(func(ctx context.Context, req reconcile.Request) reconcile.Answer {
				if down {
					return reconcile.CantSayBecause(errors.New("the bookings API is down"))
				}
				mu.Lock()
				defer mu.Unlock()
				if live[form(req.Ref, sentAs)] {
					return reconcile.AppliedWith(nil)
				}
				return reconcile.NotAppliedFenced()
			})
			tool, err := agenttool.New("book_flight", "Book a flight.", func(ctx context.Context, in invoiceInput) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				step := ""
				if len(script) > 0 {
					step, script = script[0], script[1:]
				}
				if step == "lost before" {
					return "", errLostReply
				}
				live[form(agenttool.RequestRef(ctx), sentAs)] = true
				if step == "lost after" {
					return "", errLostReply
				}
				return "booked", nil
			}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, RefSentAs: sentAs, Reconciler: check, Retry: agenttool.RetryPolicy{MaxAttempts: 1},
				ClockSkew: -1})
			if err != nil {
				t.Fatal(err)
			}
			return tool
		}
		const x, y = `{"customer":"ana","amount":1,"currency":"EUR","memo":"TP1235"}`, `{"customer":"ana","amount":1,"currency":"EUR","memo":"TP1301"}`
		first := build(base, inHeader, true).Invoke(scoped(), x)
		mustStatus(t, first, envelope.UnknownOutcome)

		store := &onGet{Store: base, key: first.RequestRef}
		old := build(store, inHeader, false)
		op, err := agenttool.NewOperator(base, build(base, inHeader, false))
		if err != nil {
			t.Fatal(err)
		}
		meanwhile := func() {
			if err := op.ResolveNotApplied(context.Background(), first.RequestRef, 1, "maria", "not in the ledger"); err != nil {
				t.Error(err)
			}
			retried := build(base, inHeaderUUID, true).Invoke(scoped(), x)
			if retried.Status != envelope.UnknownOutcome {
				t.Errorf("the approved retry by the other definition: %s; want unknown", retried)
			}
		}
		store.then.Store(&meanwhile)
		next := old.Invoke(scoped(), y)
		rec, err := base.Get(context.Background(), first.RequestRef)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		booked := len(live)
		mu.Unlock()
		if booked != 1 || rec.State != agenttool.Unknown || next.Status == envelope.Success {
			t.Errorf("the fence's check of the earlier booking, retried another way meanwhile: %s; the earlier booking's record %v (replaced by %q); %d bookings; "+
				"want the new write held, the earlier booking left unknown", next, rec.State, rec.ReplacedBy, booked)
		}
	})
}

// A record an earlier version made keeps that version's one digest of its
// definition (its lowest bit set). It cannot say how the reference was
// sent, but it can still say whether the definition was another: an
// upgrade that also narrows IdentifyingFields gives the request another
// reference, and the held call must say so — not tell the model that
// resending the earlier request's exact input settles it, when that input
// now makes the new reference, held again.
func TestTwoDefinitionsOfOneToolMakeOneInvoiceAndSayWhy_AcrossAnUpgrade(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		api := &invoiceAPI{invoices: map[string]bool{}}
		build := func(store agenttool.Store, fields ...string) *agenttool.Tool {
			tool, err := agenttool.New("create_invoice", "Create an invoice.", api.create, agenttool.Options{
				Store: store, Class: agenttool.Keyed, IdentifyingFields: fields, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
			if err != nil {
				t.Fatal(err)
			}
			return tool
		}
		const in = `{"customer":"acme","amount":1200,"currency":"EUR","memo":"November"}`
		// The earlier version's record: as this version makes it, but for
		// its definition's digest.
		scratch := memstore.New()
		first := build(scratch).Invoke(scoped(), in)
		mustStatus(t, first, envelope.UnknownOutcome)
		made, err := scratch.Get(context.Background(), first.RequestRef)
		if err != nil {
			t.Fatal(err)
		}
		// That version's digest of the definition every field identifies.
		sum := sha256.Sum256([]byte("retrysafe/definition/v1\x00create_invoice\x00identifying amount, currency, customer, memo; class keyed; fence session; key version 2"))
		earlier := binary.BigEndian.Uint64(sum[:8]) | 1
		remake := func(store agenttool.Store, def uint64) {
			res, err := store.Claim(context.Background(), storekit.ClaimRequest{Key: made.Key, Tool: made.Tool, Principal: made.Principal, Session: made.Session,
				Fingerprint: made.Fingerprint, FenceScope: made.FenceScope, Definition: def, Owner: "earlier", Now: time.Now(), Lease: time.Minute})
			if err != nil || !res.Claimed {
				t.Fatalf("%+v, %v", res, err)
			}
			if err := store.Finish(context.Background(), storekit.FinishRequest{Key: made.Key, Token: res.Record.Token, State: agenttool.Unknown, Attempts: 1,
				Outcome: made.Outcome, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		remake(store, earlier)

		held := build(store, "customer", "amount", "currency").Invoke(scoped(), in)
		if ref, _ := held.UnknownRef(); ref != first.RequestRef || held.Error.Code != envelope.CodeEarlierUnknown ||
			held.Next == envelope.Wait || strings.Contains(held.Note, "settles it safely") ||
			!strings.Contains(held.Error.Message, "another definition of create_invoice") {
			t.Errorf("the upgraded definition's identical request: %s; want it held, naming another definition, not told that a resend settles it", held)
		}

		// Upgraded alone, the same definition: another request of the
		// scope is told that resending the earlier one settles it, and it
		// does.
		same := open()
		remake(same, earlier)
		tool := build(same)
		held = tool.Invoke(scoped(), `{"customer":"acme","amount":900,"currency":"EUR","memo":"December"}`)
		if held.Next != envelope.Wait || !strings.Contains(held.Note, "settles it safely") || strings.Contains(held.Error.Message, "another definition") {
			t.Errorf("a request held by the earlier version's action of the same definition: %s; want it told that resending that one settles it", held)
		}
		if again := tool.Invoke(scoped(), in); again.Status != envelope.Success {
			t.Errorf("the resend of the earlier version's action: %s; want success", again)
		}
	})
}
