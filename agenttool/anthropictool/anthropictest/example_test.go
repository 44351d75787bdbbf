package anthropictest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/anthropictool"
	"github.com/retrysafe/retrysafe/agenttool/anthropictool/anthropictest"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/modeltest"
	"github.com/retrysafe/retrysafe/envelope"
)

// A model that books a seat, reads that the outcome is unknown, and books
// it again in the same words: one booking, as the airline dedupes the
// reference.
func Example() {
	booked := map[string]bool{}
	lost := true
	book, _ := agenttool.New("book_seat", "Book one seat.", func(ctx context.Context, in struct {
		Flight string `json:"flight"`
	}) (string, error) {
		booked[agenttool.RequestRef(ctx)] = true
		if lost {
			lost = false
			return "", errors.New("read: connection reset by peer")
		}
		return "BK-1001", nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	box, _ := anthropictool.New(book)

	seat := modeltest.Call{Name: "book_seat", Arguments: `{"flight":"TP1234"}`}
	m, stop, err := anthropictest.Start(modeltest.Scripted(nil, modeltest.Calls(seat), modeltest.Calls(seat), modeltest.Final("Booked.")))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	ctx := agenttool.WithScope(context.Background(), "tenant-1/sam", "conversation-1")
	params := anthropic.MessageNewParams{Model: "test-model", MaxTokens: 1024, Tools: box.Definitions(),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Book TP1234."))}}
	for {
		msg, err := m.Client.Messages.New(ctx, params)
		if err != nil {
			fmt.Println(err)
			return
		}
		params.Messages = append(params.Messages, msg.ToParam())
		results := box.Run(ctx, *msg)
		if len(results) == 0 {
			fmt.Println("model:", msg.Content[0].Text)
			break
		}
		params.Messages = append(params.Messages, results...)
	}
	for _, r := range m.Results() { // every tool result the model read
		env, _ := envelope.Parse([]byte(r))
		fmt.Println("tool:", env.Status)
	}
	fmt.Println("bookings:", len(booked))
	// Output:
	// model: Booked.
	// tool: unknown_outcome
	// tool: success
	// bookings: 1
}
