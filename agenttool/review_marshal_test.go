package agenttool_test

import (
	"context"
	"encoding/json"
	"math/big"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// addr is a well-behaved custom type: it reads and writes itself as a JSON
// string, with both methods on the pointer receiver (the usual style).
type addr struct{ a string }

func (x *addr) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &x.a) }
func (x *addr) MarshalJSON() ([]byte, error) { return json.Marshal(x.a) }

type addrEmail struct {
	To      addr   `json:"to"`
	Subject string `json:"subject"`
}

// Regression: two different recipients get one key and one fingerprint, so the
// email to bob is "replayed" as a success although bob got nothing.
func TestKeyUsesPointerReceiverMarshalers(t *testing.T) {
	var mu sync.Mutex
	var delivered []string
	send := func(ctx context.Context, in addrEmail) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, in.To.a)
		return "sent to " + in.To.a, nil
	}
	tool, err := agenttool.New("send_email", "Send an email.", send, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
	if err != nil {
		t.Fatal(err)
	}
	ana := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch"}`)
	bob := tool.Invoke(scoped(), `{"to":"bob@example.com","subject":"Lunch"}`)
	t.Logf("ana: %s", ana)
	t.Logf("bob: %s", bob)
	t.Logf("delivered: %v", delivered)
	mustStatus(t, ana, envelope.Success)
	if bob.Status == envelope.Success && len(delivered) == 1 {
		t.Fatalf("envelope says success for bob, but only %v was delivered (same ref %s for both)", delivered, bob.RequestRef)
	}
}

type transfer struct {
	To     string  `json:"to"`
	Amount big.Int `json:"amount"`
}

// Regression: a standard-library type (math/big.Int, pointer-receiver
// MarshalJSON) as a value field: 100 and 1000000 get one key and one
// fingerprint.
func TestKeyTellsBigIntsApart(t *testing.T) {
	var mu sync.Mutex
	var paid []string
	pay := func(ctx context.Context, in transfer) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		paid = append(paid, in.Amount.String())
		return "paid " + in.Amount.String(), nil
	}
	tool, err := agenttool.New("pay", "Pay.", pay, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
	if err != nil {
		t.Fatal(err)
	}
	small := tool.Invoke(scoped(), `{"to":"ana","amount":100}`)
	large := tool.Invoke(scoped(), `{"to":"ana","amount":1000000}`)
	t.Logf("100: %s", small)
	t.Logf("1000000: %s", large)
	if large.Status == envelope.Success && len(paid) == 1 {
		t.Fatalf("success for 1000000 but only %v was paid; refs %s / %s", paid, small.RequestRef, large.RequestRef)
	}
}
