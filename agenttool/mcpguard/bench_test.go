package mcpguard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCall measures a keyed call through the guard (bbolt) against
// the same call straight to the server, both over in-memory transports.
func BenchmarkCall(b *testing.B) {
	a := &airline{}
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
		for i := 0; b.Loop(); i++ {
			if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "book", Arguments: map[string]any{"flight": "TP", "passenger": fmt.Sprint(i)}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("guarded", func(b *testing.B) {
		r := newRig(b, a, rigOptions{})
		for i := 0; b.Loop(); i++ {
			if _, err := r.client.CallTool(context.Background(), &mcp.CallToolParams{Name: "book", Arguments: map[string]any{"flight": "TP", "passenger": fmt.Sprint(i)}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
