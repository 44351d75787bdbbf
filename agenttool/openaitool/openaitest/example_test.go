package openaitest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/openai/openai-go/v3"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/modeltest"
	"github.com/retrysafe/retrysafe/agenttool/openaitool"
	"github.com/retrysafe/retrysafe/agenttool/openaitool/openaitest"
)

// A model that sends an email, reads that its outcome is unknown (the
// mail server took it and the reply was lost), and sends it again: one
// email, because the key is the same and the mail server dedupes it.
func Example() {
	sent := map[string]int{}
	lost := true
	send, _ := agenttool.New("send_email", "Send an email.", func(ctx context.Context, in struct {
		To string `json:"to"`
	}) (string, error) {
		sent[agenttool.RequestRef(ctx)] = 1 // the server dedupes by the reference
		if lost {
			lost = false
			return "", errors.New("read: connection reset by peer")
		}
		return "queued", nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	box, _ := openaitool.New(send)

	email := modeltest.Call{Name: "send_email", Arguments: `{"to":"ana@example.com"}`}
	m, stop, err := openaitest.Start(modeltest.Scripted(nil, modeltest.Calls(email), modeltest.Calls(email), modeltest.Final("Sent.")))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	ctx := agenttool.WithScope(context.Background(), "tenant-1/sam", "conversation-1")
	params := openai.ChatCompletionNewParams{Model: "test-model", Tools: box.Definitions(),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Email Ana.")}}
	for {
		completion, err := m.Client.Chat.Completions.New(ctx, params)
		if err != nil {
			fmt.Println(err)
			return
		}
		msg := completion.Choices[0].Message
		params.Messages = append(params.Messages, msg.ToParam())
		if len(msg.ToolCalls) == 0 {
			fmt.Println("model:", msg.Content)
			break
		}
		for i, env := range box.Envelopes(ctx, msg) {
			fmt.Println("tool:", env.Status)
			params.Messages = append(params.Messages, openai.ToolMessage(env.String(), msg.ToolCalls[i].ID))
		}
	}
	fmt.Println("emails:", len(sent))
	// Output:
	// tool: unknown_outcome
	// tool: success
	// model: Sent.
	// emails: 1
}
