package einotest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudwego/eino/flow/agent/react"
	"github.com/cloudwego/eino/schema"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/einotool"
	"github.com/retrysafe/retrysafe/agenttool/einotool/einotest"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/modeltest"
	"github.com/retrysafe/retrysafe/envelope"
)

// A react agent whose model sends an email, reads that its outcome is
// unknown, and sends it again: one email.
func Example() {
	sent := map[string]bool{}
	lost := true
	send, _ := agenttool.New("send_email", "Send an email.", func(ctx context.Context, in struct {
		To string `json:"to"`
	}) (string, error) {
		sent[agenttool.RequestRef(ctx)] = true
		if lost {
			lost = false
			return "", errors.New("read: connection reset by peer")
		}
		return "queued", nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})

	email := modeltest.Call{Name: "send_email", Arguments: `{"to":"ana@example.com"}`}
	m, stop, err := einotest.Start(modeltest.Scripted(nil, modeltest.Calls(email), modeltest.Calls(email), modeltest.Final("Sent.")))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := agenttool.WithScope(context.Background(), "tenant-1/sam", "conversation-1")
	tools, _ := einotool.ToolsConfig(send)
	agent, err := react.NewAgent(ctx, &react.AgentConfig{ToolCallingModel: m.ChatModel, ToolsConfig: tools})
	if err != nil {
		fmt.Println(err)
		return
	}
	answer, err := agent.Generate(ctx, []*schema.Message{schema.UserMessage("Email Ana.")})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("model:", answer.Content)
	for _, r := range m.Results() {
		env, _ := envelope.Parse([]byte(r))
		fmt.Println("tool:", env.Status)
	}
	fmt.Println("emails:", len(sent))
	// Output:
	// model: Sent.
	// tool: unknown_outcome
	// tool: success
	// emails: 1
}
