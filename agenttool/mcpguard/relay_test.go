package mcpguard_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/envelope"
)

// asker is a server whose send_message asks the user twice — "Send it?",
// then "Really?" — before it sends, and counts what it sends. Its state
// is in requestState, as SEP-2322 has it.
type asker struct {
	mu   sync.Mutex
	sent []string
}

func (a *asker) server() *mcp.Server {
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	yes := map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}
	mcp.AddTool(up, &mcp.Tool{Name: "send_message", Description: "Send a message, once the user confirms twice."},
		func(_ context.Context, req *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, map[string]string, error) {
			switch req.Params.RequestState {
			case "":
				return &mcp.CallToolResult{RequestState: "asked-once", InputRequests: mcp.InputRequestMap{
					"confirm": &mcp.ElicitParams{Message: "Send it?", RequestedSchema: yes}}}, nil, nil
			case "asked-once":
				return &mcp.CallToolResult{RequestState: "asked-twice", InputRequests: mcp.InputRequestMap{
					"really": &mcp.ElicitParams{Message: "Really?", RequestedSchema: yes}}}, nil, nil
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			a.sent = append(a.sent, in.Text)
			return nil, map[string]string{"sent": in.Text}, nil
		})
	return up
}

func (a *asker) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.sent)
}

const askerConfig = `{"principal": "ana@example.com", "mcpServers": {"sender": {"command": "sender-mcp",
  "tools": {"send_message": {"class": "at_most_once"}}}}}`

// A client of the revision before 2026-07-28 reads a result that carries
// only inputRequests (no resultType: the SDK marks one only for a session
// of the later revision) as an empty success. The SDK answers such a
// client's first question for it, once; the guard must never hand it a
// second one bare — whatever revision the request's _meta claims, it is the
// session's revision that decides how the SDK sends the result.
func TestRelay_AnOldSessionNeverReadsASecondQuestionAsASuccess(t *testing.T) {
	a := &asker{}
	g := guardOver(t, a.server(), askerConfig, mcpguard.Options{})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int64
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "old-desktop", Version: "1"}, &mcp.ClientOptions{
		// An old client knows nothing of multi-round-trip results.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		}}).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	// The request's _meta names the later revision (a client, or a proxy in
	// front of it, that stamps it), on a session of the earlier one.
	meta := mcp.Meta{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{}}}
	res, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch?"}, meta)
	if !res.IsError && env.Status != envelope.Success {
		t.Fatalf("an old client reads success (isError false, %d content blocks, envelope %q, %d input requests it cannot see), "+
			"after %d questions and %d messages sent; want a definite failure that names the second question",
			len(res.Content), env.Status, len(res.InputRequests), asked.Load(), a.count())
	}
	if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != mcptool.CodeInputRequired || a.count() != 0 {
		t.Errorf("%s after %d messages sent; want definite_failure input_required, nothing sent", env, a.count())
	}
}

var _ = fmt.Sprint
