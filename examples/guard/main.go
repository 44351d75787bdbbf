// Command guard: retrysafe's guard in front of a plain MCP server, with no
// code on either side.
//
// The airline is an MCP server written with the official Go SDK, as any
// third party writes one: book_flight takes an idempotency_key and honours
// it, find_booking reads. It knows nothing of retrysafe. The guard stands
// in front of it, configured as an operator would (the configuration is
// printed first): book_flight is keyed by its own idempotency_key, which
// the guard fills and hides from the client. A scripted client — a model
// that retries and rewords, as models do — books a seat.
//
//	go run ./examples/guard                     # fault lose-reply: the airline books, and its replies are lost
//	go run ./examples/guard -fault none
//	go run ./examples/guard -json               # one line: the effects and every envelope
//
// With -fault lose-reply the airline books and every reply of the first
// call is lost (the guard's own retry, with the same key, too): the call
// is unknown_outcome. The model rewords the booking: held back. It then
// sends the first request again, as the answer says: the guard resends it
// with the same key, the airline answers the booking it made. One
// booking. Everything runs in this process, over in-memory MCP
// transports; the guard's store is a bbolt file in a temporary directory
// (-db to keep it).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/envelope"
)

// config is the guard's configuration, as an operator writes it: the
// desktop client's mcpServers entry, with a tools map added.
const config = `{
  "principal": "ana@example.com",
  "mcpServers": {
    "airline": {
      "command": "airline-mcp",
      "tools": {
        "book_flight": {"class": "keyed", "key_argument": "idempotency_key"},
        "find_booking": {"class": "read_only"}
      }
    }
  }
}`

// Summary is the -json output.
type Summary struct {
	Example   string              `json:"example"`
	Fault     string              `json:"fault"`
	Effects   int                 `json:"effects"`
	Envelopes []envelope.Envelope `json:"envelopes"`
}

func main() {
	_, err := run(context.Background(), os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "guard: %v\n", err)
		os.Exit(1)
	}
}

// run runs the example and returns what it printed with -json.
func run(ctx context.Context, args []string, stdout io.Writer) (*Summary, error) {
	fs := flag.NewFlagSet("guard", flag.ContinueOnError)
	fault := fs.String("fault", "lose-reply", "lose-reply (the airline books, and the first call's replies are lost) or none")
	asJSON := fs.Bool("json", false, "print one line of JSON: the bookings made and every envelope")
	db := fs.String("db", "", "the guard's store `PATH` (default: a temporary file)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *fault != "lose-reply" && *fault != "none" {
		return nil, fmt.Errorf("unknown -fault %q: lose-reply or none", *fault)
	}
	out := stdout
	if *asJSON {
		out = io.Discard
	}
	path := *db
	if path == "" {
		dir, err := os.MkdirTemp("", "retrysafe-guard-example")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "guard.db")
	}

	a := &airline{}
	if *fault == "lose-reply" {
		a.lose = 2 // the first call's two attempts
	}
	up := a.server()
	cfg, err := mcpguard.ParseConfig([]byte(config))
	if err != nil {
		return nil, err
	}
	cfg.Store.Path = path
	fmt.Fprintf(out, "The guard's configuration:\n%s\n\n", config)
	g, err := mcpguard.New(ctx, cfg, &mcpguard.Options{
		Logger: slog.New(slog.DiscardHandler),
		// Offline: the airline runs in this process. `retrysafe guard`
		// starts its command instead.
		Transport: func(string, *mcpguard.Server) (mcp.Transport, error) {
			ct, st := mcp.NewInMemoryTransports()
			_, err := up.Connect(ctx, st, nil)
			return ct, err
		},
		Tune: func(_ string, o *agenttool.Options) {
			o.Retry = agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: 1}
		},
		// Whose action each record is, for an operator's list.
		Label: func(context.Context, *mcp.CallToolRequest) string { return "Ana Lima, trip to Lisbon" },
	})
	if err != nil {
		return nil, err
	}
	defer g.Close()
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(ctx, st, nil); err != nil {
		return nil, err
	}
	client, err := mcp.NewClient(&mcp.Implementation{Name: "desktop-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		return nil, err
	}
	defer client.Close()

	sum := &Summary{Example: "guard", Fault: *fault}
	call := func(say string, args map[string]any) (envelope.Envelope, error) {
		b, _ := json.Marshal(args)
		fmt.Fprintf(out, "model: %s\n  book_flight %s\n", say, b)
		res, err := client.CallTool(ctx, &mcp.CallToolParams{Name: "book_flight", Arguments: args})
		if err != nil {
			return envelope.Envelope{}, err
		}
		var env envelope.Envelope
		raw, _ := json.Marshal(res.Meta[mcptool.MetaEnvelope])
		if err := json.Unmarshal(raw, &env); err != nil {
			return env, fmt.Errorf("the guard's answer carries no envelope: %w", err)
		}
		sum.Envelopes = append(sum.Envelopes, env)
		fmt.Fprintf(out, "  -> %s", env.Status)
		if env.Error != nil {
			fmt.Fprintf(out, " (%s)", env.Error.Code)
		}
		if env.Status == envelope.Success {
			fmt.Fprintf(out, ": %s", text(res))
		} else if env.Note != "" {
			fmt.Fprintf(out, "\n     %s", env.Note)
		}
		fmt.Fprintf(out, "\n\n")
		return env, nil
	}

	booking := map[string]any{"flight": "TP1234", "date": "2026-12-12", "passenger": "Ana Lima"}
	env, err := call("Book Ana Lima on TP1234 on 12 December.", booking)
	if err != nil {
		return nil, err
	}
	if env.Status == envelope.UnknownOutcome {
		// A model that reads "may already have happened" and tries again
		// in other words.
		reworded := map[string]any{"flight": "TP1234", "date": "2026-12-12", "passenger": "Ana Lima (window seat)"}
		if _, err := call("That timed out. Let me try again.", reworded); err != nil {
			return nil, err
		}
		// The answer says that resending the first request settles it.
		if _, err := call("Resending the first request, as the answer says.", booking); err != nil {
			return nil, err
		}
	}
	sum.Effects = a.count()
	fmt.Fprintf(out, "bookings: %d\n", sum.Effects)
	if *asJSON {
		b, err := json.Marshal(sum)
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(stdout, string(b))
	}
	return sum, nil
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, " ")
}

// airline is a plain MCP server: it books seats, honours an
// idempotency_key, and counts its bookings. lose is how many of its next
// book_flight replies are lost after it acted.
type airline struct {
	mu       sync.Mutex
	bookings []string
	byKey    map[string]string
	lose     int
}

type bookIn struct {
	Flight         string `json:"flight"`
	Date           string `json:"date"`
	Passenger      string `json:"passenger"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

type bookOut struct {
	Booking string `json:"booking"`
}

var errLost = errors.New("connection reset by peer")

func (a *airline) book(_ context.Context, _ *mcp.CallToolRequest, in bookIn) (*mcp.CallToolResult, bookOut, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.byKey[in.IdempotencyKey]
	if !ok || in.IdempotencyKey == "" {
		id = fmt.Sprintf("BK-%d", len(a.bookings)+1)
		a.bookings = append(a.bookings, id)
		if in.IdempotencyKey != "" {
			if a.byKey == nil {
				a.byKey = map[string]string{}
			}
			a.byKey[in.IdempotencyKey] = id
		}
	}
	if a.lose > 0 {
		a.lose--
		return nil, bookOut{}, errLost // booked (or replayed); the reply never arrives
	}
	return nil, bookOut{Booking: id}, nil
}

func (a *airline) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.bookings)
}

func (a *airline) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "book_flight", Description: "Book one seat on a flight."}, a.book)
	mcp.AddTool(s, &mcp.Tool{Name: "find_booking", Description: "Find a booking."},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Booking string `json:"booking"`
		}) (*mcp.CallToolResult, map[string]bool, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, b := range a.bookings {
				if b == in.Booking {
					return nil, map[string]bool{"found": true}, nil
				}
			}
			return nil, map[string]bool{"found": false}, nil
		})
	return s
}
