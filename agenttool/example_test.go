package agenttool_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

type bookInput struct {
	Flight    string `json:"flight" desc:"flight number, e.g. TP1234"`
	Passenger string `json:"passenger"`
}

type booking struct {
	Confirmation string `json:"confirmation"`
}

// Build a guarded tool from a Go function. The destination commits the first
// booking and the reply is lost; the keyed retry reuses the request
// reference, so the destination answers with the booking it already made.
func ExampleNew() {
	bookings := map[string]booking{} // the destination, keyed by request reference
	replies := 0
	book := func(ctx context.Context, in bookInput) (booking, error) {
		ref := agenttool.RequestRef(ctx)
		b, seen := bookings[ref]
		if !seen {
			b = booking{Confirmation: fmt.Sprintf("CONF-%d", len(bookings)+1)}
			bookings[ref] = b
		}
		if replies++; replies == 1 {
			return booking{}, errors.New("read: connection reset by peer") // committed, reply lost
		}
		return b, nil
	}
	tool, err := agenttool.New("book_flight", "Book a seat on a flight.", book, agenttool.Options{
		Store: memstore.New(), // use boltstore or pgstore where it matters
		Class: agenttool.Keyed,
		Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")
	env := tool.Invoke(ctx, `{"flight":"TP1234","passenger":"Ana Lima"}`)
	fmt.Println(env.Status, env.Attempts, string(env.Result))
	// The model repeats the call: the stored outcome is replayed.
	env = tool.Invoke(ctx, `{"passenger":"Ana Lima","flight":"TP1234"}`)
	fmt.Println(env.Status, env.Replayed, string(env.Result))
	fmt.Println("bookings:", len(bookings))
	// Output:
	// success 2 {"confirmation":"CONF-1"}
	// success true {"confirmation":"CONF-1"}
	// bookings: 1
}

type mailer struct{ sent int }

func (*mailer) Name() string        { return "send_email" }
func (*mailer) Description() string { return "Send an email. Input: JSON with to, subject, body." }
func (m *mailer) Call(ctx context.Context, input string) (string, error) {
	m.sent++
	return "", errors.New("i/o timeout") // sent, but the reply timed out
}

// Wrap an existing langchaingo tool. Its reply timed out after the message
// went out; the tool is reconcilable, so it is not run again and the model is
// told what to do.
func ExampleWrap() {
	m := &mailer{}
	send, err := agenttool.Wrap(m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable,
		SettledByOperators: true,                      // nothing can ask this mail API; a person settles
		IdentifyingFields:  []string{"to", "subject"}, // the members that tell one email from another
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")
	input := `{"to":"ana@example.com","subject":"Lunch","body":"See you at noon."}`
	out, _ := send.Call(ctx, input) // what the agent's model reads
	env, _ := envelope.Parse([]byte(out))
	fmt.Println(env.Status, env.Error.Code, env.Next)
	// The model calls again anyway; nothing is sent twice.
	out, _ = send.Call(ctx, input)
	env, _ = envelope.Parse([]byte(out))
	fmt.Println(env.Status, env.Replayed, env.Next)
	fmt.Println("messages sent:", m.sent)
	// Output:
	// unknown_outcome outcome_unknown do_not_retry
	// unknown_outcome true do_not_retry
	// messages sent: 1
}

// A model that adds its own idempotency key is told to drop it.
func ExampleTool_Invoke_modelSuppliedKey() {
	send, _ := agenttool.Wrap(&mailer{}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, IdentifyingFields: []string{"to"}})
	ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")
	env := send.Invoke(ctx, `{"to":"ana@example.com","idempotency_key":"my-key-1"}`)
	fmt.Println(env.Status, env.Error.Code, env.Next)
	// Output: definite_failure model_supplied_key fix_input
}

// An operator settles an action whose outcome a reconciler could not learn.
func ExampleOperator() {
	store := memstore.New()
	send, _ := agenttool.Wrap(&mailer{}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, SettledByOperators: true, IdentifyingFields: []string{"to"}})
	ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")
	input := `{"to":"ana@example.com","subject":"Lunch"}`
	send.Invoke(ctx, input) // the reply timed out: unknown

	op, _ := agenttool.NewOperator(store, send)
	recs, _ := op.ForPrincipal("tenant-42/user-7").Unknown(ctx, "", 10)
	fmt.Println("awaiting reconciliation:", len(recs))
	err := op.ResolveApplied(ctx, recs[0].Key, recs[0].Attempts, []byte(`{"message_id":"<m1@mail.example>"}`), "maria", "found in Sent")
	fmt.Println("resolved:", err == nil)

	env := send.Invoke(ctx, input)
	fmt.Println(env.Status, env.Reconciled, string(env.Result))
	// Output:
	// awaiting reconciliation: 1
	// resolved: true
	// success true {"message_id":"<m1@mail.example>"}
}
