package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/console"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// An at-most-once tool whose reply was lost asks the console's Approvals;
// the console lists the action for a person to decide.
func ExampleNew() {
	store := memstore.New()
	approvals := &console.Approvals{}
	charge, _ := agenttool.New("charge_card", "Charge a card.", func(ctx context.Context, in struct {
		Card string `json:"card"`
	}) (string, error) {
		return "", envelope.MarkUnknown(errors.New("connection reset by peer")) // sent; the reply is lost
	}, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Approver: approvals, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})

	ctx := agenttool.WithLabel(agenttool.WithScope(context.Background(), "tenant-1/ana", "conversation-1"), "Ana Lima")
	charge.Invoke(ctx, `{"card":"4242"}`)
	env := charge.Invoke(ctx, `{"card":"4242"}`) // the agent asks again
	fmt.Println(env.Status, env.Next)

	op, _ := agenttool.NewOperator(store, charge)
	h, _ := console.New(console.Options{
		Operator:  op,
		Approvals: approvals,
		Who: func(r *http.Request) (console.Viewer, error) {
			return console.Viewer{Name: "maria", Principals: []string{"tenant-1/ana"}}, nil // from your authentication
		},
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	page := rec.Body.String()
	fmt.Println(rec.Code, strings.Contains(page, env.RequestRef), strings.Contains(page, "Ana Lima"),
		strings.Contains(page, "The agent asked for a decision once."))
	// Output:
	// unknown_outcome ask_human
	// 200 true true true
}
