package temporaltool_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
)

type table struct {
	Restaurant string `json:"restaurant"`
	Time       string `json:"time"`
}

// bookTable books at a restaurant that honours the request reference as
// an idempotency key.
func bookTable(ctx context.Context, in table) (string, error) {
	return "booked " + in.Restaurant + " at " + in.Time, nil
}

// A guarded tool registered as an activity in one line, and called from
// a workflow in one line. The test environment stands in for a worker.
func Example() {
	book, err := agenttool.New("book_table", "Book a table.", bookTable, agenttool.Options{
		Store: memstore.New(), // boltstore or pgstore in production
		Class: agenttool.Keyed,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, // Temporal owns the retries
		// An attempt ends before Temporal would cut it.
		AttemptTimeout: 10 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	w := suite.NewTestWorkflowEnvironment() // a worker.Worker in production

	bookAct, err := temporaltool.Register(w, book, nil)
	if err != nil {
		panic(err)
	}

	agent := func(ctx workflow.Context, args string) (envelope.Envelope, error) {
		// Trusted workflow code says who acts; the model wrote args, so a
		// repeat of them is the same action (ByInput).
		return temporaltool.Execute(ctx, bookAct, temporaltool.Call{Principal: "tenant-42/user-7", Args: args, Identity: temporaltool.ByInput})
	}
	w.RegisterWorkflow(agent)
	w.ExecuteWorkflow(agent, `{"restaurant":"Lisboa","time":"20:00"}`)
	var env envelope.Envelope
	if err := w.GetWorkflowResult(&env); err != nil {
		panic(err)
	}
	fmt.Println(env.Status, string(env.Result))
	// Output: success "booked Lisboa at 20:00"
}
