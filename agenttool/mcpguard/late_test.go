package mcpguard_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/envelope"
)

// politeAirline is a plain MCP server whose first book_noted takes commit
// to commit and stops, booking nothing, if its call is cancelled before
// then (the handler honours its context, as the Go SDK cancels it on
// notifications/cancelled); later calls book at once. firstDone is closed
// once the first call has committed or stopped.
func politeAirline(a *airline, commit time.Duration) (s *mcp.Server, firstDone <-chan struct{}) {
	done := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	calls := 0
	s = mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "book_noted", Description: "Book one seat, keeping a client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in bookIn) (*mcp.CallToolResult, booking, error) {
			mu.Lock()
			calls++
			first := calls == 1
			mu.Unlock()
			if !first {
				return a.book(in)
			}
			defer once.Do(func() { close(done) })
			select {
			case <-time.After(commit):
				return a.book(in)
			case <-ctx.Done():
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "cancelled, nothing booked"}}}, booking{}, nil
			}
		})
	type findIn struct {
		Reference string `json:"client_reference"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "find_booking", Description: "Find a booking by its client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, map[string]any, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, b := range a.bookings {
				if b.Reference == in.Reference {
					return nil, map[string]any{"found": true, "booking": b}, nil
				}
			}
			return nil, map[string]any{"found": false}, nil
		})
	return s, done
}

// I1 with listen_late, for a reconcilable tool configured as
// docs/guard.md shows it. The guard trusts a check's "not found" once
// attempt_timeout (plus a second) has passed since the last attempt was
// sent, "since a request the server took may still land until then". With
// listen_late the guard no longer cancels the attempt at the server at its
// deadline: it keeps the request open there for up to listen_late more,
// and the request may land until then. A check in that window that finds
// nothing yet must not let a second attempt go.
//
// The server honours cancellation and commits its first booking after
// 3s. With listen_late "0s" the guard cancels the request at the deadline
// (200ms), the server books nothing, and the retry books once. With the
// default listen_late the request stays open, the model's retry 1.5s
// after the unknown outcome is checked (nothing found yet, and more than
// attempt_timeout + 1s since sent), a second booking is sent, and the
// first request commits too: two bookings for one action.
func TestGuard_ACheckNeverLetsASecondAttemptGoWhileTheGuardStillListensForTheFirst(t *testing.T) {
	for _, listenLate := range []string{"0s", ""} {
		t.Run("listen_late="+listenLate, func(t *testing.T) {
			a := &airline{}
			up, firstDone := politeAirline(a, 3*time.Second)
			late := ""
			if listenLate != "" {
				late = `, "listen_late": "` + listenLate + `"`
			}
			cfg, err := mcpguard.ParseConfig([]byte(`{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
			  "book_noted": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "200ms"` + late + `,
			    "check": {"tool": "find_booking", "arguments": {"client_reference": "${ref}"},
			      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
			  "find_booking": {"class": "read_only"}}}}}`))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
			transport := func(string, *mcpguard.Server) (mcp.Transport, error) {
				ct, st := mcp.NewInMemoryTransports()
				if _, err := up.Connect(context.Background(), st, nil); err != nil {
					return nil, err
				}
				return ct, nil
			}
			g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: transport, Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			cs := connect(t, g)

			_, first := call(t, cs, "book_noted", lunchFlight, nil)
			if first.Status != envelope.UnknownOutcome {
				t.Fatalf("a call past its attempt timeout: %s; want unknown_outcome", first)
			}
			// attempt_timeout + 1s after the attempt ended, and well before
			// the first request commits (3s).
			time.Sleep(1500 * time.Millisecond)
			_, again := call(t, cs, "book_noted", lunchFlight, nil)
			select {
			case <-firstDone:
			case <-time.After(10 * time.Second):
				t.Fatal("the first request neither committed nor stopped in 10s")
			}
			time.Sleep(100 * time.Millisecond)
			t.Logf("first: %s\nretry: %s", first, again)
			if n := a.count(); n != 1 {
				t.Errorf("%d bookings for one action, want 1 (the retry answered %s)", n, again.Status)
			}
		})
	}
}
