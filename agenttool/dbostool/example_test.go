package dbostool_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/dbostool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// Notice is a workflow's input: who acts, from the application's own
// records, and the arguments a model wrote for the tool.
type Notice struct {
	User     string
	UserName string
	Args     string
}

// A workflow sends one email through a guarded tool, in one line. The
// store shares DBOS's database, in a schema of its own. (Not run: it needs
// a PostgreSQL.)
func Example() {
	ctx := context.Background()
	url := os.Getenv("DATABASE_URL")
	store, err := pgstore.Open(ctx, &pgstore.Options{URL: url}) // schema "retrysafe"; DBOS's is "dbos"
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	send, err := agenttool.New("send_email", "Send an email.", func(ctx context.Context, in email) (string, error) {
		// Pass agenttool.RequestRef(ctx) to the mail API as its idempotency key.
		return "sent", nil
	}, agenttool.Options{
		Store: store,
		Class: agenttool.Keyed,
		Lease: 15 * time.Second, // a step DBOS runs again after a crash waits out a dead process's claim: sooner than the default minute
	})
	if err != nil {
		log.Fatal(err)
	}
	sendStep, err := dbostool.New(send, nil) // ByStep; the tool owns retries
	if err != nil {
		log.Fatal(err)
	}

	notify := func(ctx dbos.Context, in Notice) (envelope.Envelope, error) {
		return sendStep.Run(ctx, dbostool.Call{Principal: in.User, Label: in.UserName, Args: in.Args})
	}
	dbosCtx, err := dbos.NewContext(ctx, dbos.Config{AppName: "mailer", DatabaseURL: url})
	if err != nil {
		log.Fatal(err)
	}
	dbos.RegisterWorkflow(dbosCtx, notify)
	if err := dbos.Launch(dbosCtx); err != nil {
		log.Fatal(err)
	}
	defer dbos.Shutdown(dbosCtx, 10*time.Second)

	h, err := dbos.RunWorkflow(dbosCtx, notify, Notice{User: "tenant-42/user-7", UserName: "Sam Diaz", Args: `{"to":"ana@example.com","subject":"Lunch"}`})
	if err != nil {
		log.Fatal(err)
	}
	env, err := h.GetResult()
	if err != nil {
		log.Fatal(err) // DBOS's, not the tool's: the envelope says what the tool did
	}
	log.Println(env.Status, env.RequestRef)
}
