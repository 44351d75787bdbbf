package mcpguard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool/memstore"
)

// BenchmarkCall measures a keyed call through the guard against the same
// call straight to the server, both over in-memory transports: on bbolt,
// on memstore (the guard's work without a disk), and a read-only call
// passed through (the second MCP round trip alone).
func BenchmarkCall(b *testing.B) {
	a := &airline{}
	book := func(b *testing.B, cs *mcp.ClientSession) {
		for i := 0; b.Loop(); i++ {
			if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "book", Arguments: map[string]any{"flight": "TP", "passenger": fmt.Sprint(i)}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("straight", func(b *testing.B) {
		ct, st := mcp.NewInMemoryTransports()
		if _, err := a.server().Connect(context.Background(), st, nil); err != nil {
			b.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(), ct, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		book(b, cs)
	})
	b.Run("guarded", func(b *testing.B) {
		book(b, newRig(b, a, rigOptions{}).client)
	})
	b.Run("guarded-memstore", func(b *testing.B) {
		book(b, newRig(b, a, rigOptions{store: memstore.New()}).client)
	})
	b.Run("passed-through", func(b *testing.B) {
		cs := newRig(b, a, rigOptions{}).client
		for b.Loop() {
			if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_flights", Arguments: map[string]any{}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
