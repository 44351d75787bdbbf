package mcptool_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// I4 with ToolOptions.LateWindow: a plain server posts a note 300ms after
// the call, past the tool's 100ms attempt timeout. The call is unknown at
// its deadline; the server's answer, heard within the window, settles the
// action by SettleLate, and the next call of the action answers success
// with the server's result, posting nothing more.
func TestALateAnswerSettlesAnUnknownOutcome(t *testing.T) {
	var posted atomic.Int64
	server := mcp.NewServer(&mcp.Implementation{Name: "slow-notes", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "post_note", Description: "Post a note."},
		func(context.Context, *mcp.CallToolRequest, struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, map[string]int64, error) {
			time.Sleep(300 * time.Millisecond) // the post runs to its end
			return nil, map[string]int64{"note": posted.Add(1)}, nil
		})
	cs := connectInMemory(t, server, "", nil)
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var op atomic.Pointer[agenttool.Operator]
	settled := make(chan error, 1)
	store := memstore.New()
	tool, err := mcptool.NewToolWith(cs, list.Tools[0],
		agenttool.Options{Store: store, Class: agenttool.AtMostOnce, IdentifyingFields: []string{"text"}, AttemptTimeout: 100 * time.Millisecond},
		mcptool.ToolOptions{LateWindow: 5 * time.Second, Late: func(info agenttool.CallInfo, result string, err error) {
			settled <- mcptool.SettleLate(context.Background(), op.Load(), info, result, err, "test")
		}})
	if err != nil {
		t.Fatal(err)
	}
	o, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	op.Store(o)
	ctx := agenttool.WithScope(context.Background(), "ana", "chat-1")
	first := tool.Invoke(ctx, `{"text": "standup moved to 10"}`)
	if first.Status != envelope.UnknownOutcome {
		t.Fatalf("a call past its attempt timeout: %s", first)
	}
	select {
	case err := <-settled:
		if err != nil {
			t.Fatalf("settling by the late answer: %v", err)
		}
	case <-time.After(10 * time.Second): // a bound on a broken test, not a timing
		t.Fatal("no late answer was heard")
	}
	again := tool.Invoke(ctx, `{"text": "standup moved to 10"}`)
	if again.Status != envelope.Success || !strings.Contains(string(again.Result), `"note":1`) {
		t.Errorf("after the late answer: %s; want success with the server's result", again)
	}
	if n := posted.Load(); n != 1 {
		t.Errorf("%d notes posted, want 1", n)
	}
}
