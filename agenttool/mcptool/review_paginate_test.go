package mcptool_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
)

// BREAK (d): a hostile (or buggy) MCP server whose tools/list always
// answers the same page with a next cursor. mcptool.Tools never returns:
// it keeps listing, guarding the same tool again on every page and
// appending it, until the caller's context ends.
func TestAnEndlessToolListingEnds(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "h", Version: "1"}, nil)
	var pages atomic.Int64
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/list" {
				return next(ctx, method, req)
			}
			pages.Add(1)
			return &mcp.ListToolsResult{NextCursor: "again", Tools: []*mcp.Tool{{Name: "book_flight",
				InputSchema: json.RawMessage(`{"type":"object","required":["flight"],"properties":{"flight":{"type":"string"}}}`)}}}, nil
		}
	})
	cs := connectInMemory(t, server, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	tools, err := mcptool.Tools(ctx, cs, mcptool.ClientOptions{Choose: func(*mcp.Tool) (agenttool.Options, bool) {
		return agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed}, true
	}})
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Tools took %v and fetched %d pages of the same tool (err %v, %d tools); it should stop at a repeated tool or cursor",
			took.Round(time.Millisecond), pages.Load(), err, len(tools))
	}
}
