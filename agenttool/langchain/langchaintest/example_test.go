package langchaintest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/tools"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// Test an agent offline: the scripted model sends an email, sends it again
// as an unsure model would, and answers. The mail API's first reply is lost;
// the guarded tool retries with the same key, and the repeat is replayed.
func ExampleNew() {
	sent := map[string]bool{} // the mail API, by idempotency key
	replies := 0
	send, err := agenttool.New("send_email", "Send an email.",
		func(ctx context.Context, e email) (string, error) {
			sent[agenttool.RequestRef(ctx)] = true
			if replies++; replies == 1 {
				return "", errors.New("read: connection reset by peer") // stored, reply lost
			}
			return "queued", nil
		},
		agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond}})
	if err != nil {
		fmt.Println(err)
		return
	}

	model := langchaintest.New(
		langchaintest.Call("send_email", `{"to":"ana@example.com","subject":"Lunch"}`),
		langchaintest.Call("send_email", `{"subject":"Lunch","to":"ana@example.com"}`).
			Checking(langchaintest.WantStatus(envelope.Success)),
		langchaintest.Final("Ana has been emailed.").
			Checking(langchaintest.WantStatus(envelope.Success)),
	)
	agent := agents.NewOpenAIFunctionsAgent(model, []tools.Tool{send})
	ctx := agenttool.WithScope(context.Background(), "tenant-1/user-1", "conversation-1")
	answer, err := chains.Run(ctx, agents.NewExecutor(agent), "Email Ana about lunch.")
	fmt.Println(answer, err)
	fmt.Println("script played:", model.Err() == nil)
	for _, result := range model.Results() {
		env, _ := envelope.Parse([]byte(result))
		fmt.Println(env.Status, "attempts", env.Attempts, "replayed", env.Replayed)
	}
	fmt.Println("emails:", len(sent))
	// Output:
	// Ana has been emailed. <nil>
	// script played: true
	// success attempts 2 replayed false
	// success attempts 2 replayed true
	// emails: 1
}

// An adaptive script decides each turn from the envelopes read so far, as a
// real model would.
func ExampleFunc() {
	model := langchaintest.Func(func(results []string) (langchaintest.Turn, error) {
		if len(results) == 0 {
			return langchaintest.Call("send_email", `{"to":"ana@example.com","subject":"Lunch"}`), nil
		}
		last, err := envelope.Parse([]byte(results[len(results)-1]))
		if err != nil {
			return langchaintest.Turn{}, err
		}
		switch last.Status {
		case envelope.Success:
			return langchaintest.Final("Ana has been emailed."), nil
		case envelope.UnknownOutcome:
			return langchaintest.Final("The email may have gone out; it is being verified (" + last.RequestRef + ")."), nil
		}
		return langchaintest.Final("I could not email Ana: " + last.Error.Message), nil
	})
	send, err := agenttool.New("send_email", "Send an email.",
		func(context.Context, email) (string, error) { return "queued", nil },
		agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	if err != nil {
		fmt.Println(err)
		return
	}
	agent := agents.NewOpenAIFunctionsAgent(model, []tools.Tool{send})
	ctx := agenttool.WithScope(context.Background(), "tenant-1/user-1", "conversation-1")
	answer, err := chains.Run(ctx, agents.NewExecutor(agent), "Email Ana about lunch.")
	fmt.Println(answer, err, model.Err())
	// Output:
	// Ana has been emailed. <nil> <nil>
}
