package agenttool_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
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
