package mcptool_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
)

// plainServer is an MCP server written the way the SDK recommends (a typed
// handler), without retrysafe: its book_flight books a seat on d, then
// answers with the booking, or with the error after returns for the n-th
// run (from 1), if after is set. The SDK passes a *jsonrpc.Error returned
// by a typed handler straight through as the call's error, and turns any
// other error into a result with isError.
func plainServer(d *desk, after func(n int) error) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "plain-bookings", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "book_flight", Description: "Book one seat."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in seat) (*mcp.CallToolResult, booking, error) {
			b, err := d.book(ctx, in)
			if err != nil {
				return nil, booking{}, err
			}
			if after != nil {
				if err := after(int(d.runs.Load())); err != nil {
					return nil, booking{}, err
				}
			}
			return nil, b, nil
		})
	server.AddReceivingMiddleware(withClientRef)
	return server
}

// notes is an ordinary (non-retrysafe) MCP server with a post_note tool
// that posts the note and answers with its text, as echo-style tools do;
// with refuse set, it posts nothing and answers isError with the text.
type notes struct {
	mu     sync.Mutex
	posted []string
}

func (n *notes) count() int { n.mu.Lock(); defer n.mu.Unlock(); return len(n.posted) }

func (n *notes) server(refuse bool) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "post_note", Description: "Post a note.", InputSchema: json.RawMessage(
		`{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			if !refuse {
				n.mu.Lock()
				n.posted = append(n.posted, in.Text)
				n.mu.Unlock()
			}
			return &mcp.CallToolResult{IsError: refuse, Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil
		})
	return server
}

// guardedByName guards the listed tool name with a store of its own.
func guardedByName(t *testing.T, cs *mcp.ClientSession, name string, class agenttool.Class) *agenttool.Tool {
	t.Helper()
	tools, err := mcptool.Tools(context.Background(), cs, mcptool.ClientOptions{ByName: map[string]agenttool.Options{
		name: {Store: memstore.New(), Class: class, Retry: agenttool.RetryPolicy{InitialInterval: 1e6}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return tools[0]
}

// textArg is post_note's input for text.
func textArg(text string) string {
	b, _ := json.Marshal(map[string]string{"text": text})
	return string(b)
}
