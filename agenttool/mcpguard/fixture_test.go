package mcpguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/envelope"
)

// airline is a plain MCP server written with the official Go SDK, as a
// third party would write it: it books seats, and counts every booking it
// makes. book takes an optional idempotency_key, which it honours (a
// repeat answers the first booking); book_noted keeps a client_reference
// with the booking, which find_booking looks up. Neither knows retrysafe.
type airline struct {
	mu       sync.Mutex
	bookings []booking
	byKey    map[string]int // idempotency key → booking index
	loseNext int            // the next n replies of book are lost (the booking is made, or replayed)
	refuse   bool           // book answers isError without booking

	traceparents []string // the traceparent of each call of book, as it arrived
	findDown     bool     // find_by_passenger answers isError
	findRefDown  bool     // find_booking answers isError
}

type booking struct {
	ID        string `json:"id"`
	Flight    string `json:"flight"`
	Passenger string `json:"passenger"`
	Reference string `json:"client_reference,omitempty"`
}

type bookIn struct {
	Flight         string `json:"flight"`
	Passenger      string `json:"passenger"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Reference      string `json:"client_reference,omitempty"`
}

var errReplyLost = errors.New("connection reset by peer")

func (a *airline) book(in bookIn) (*mcp.CallToolResult, booking, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refuse {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no such flight"}}}, booking{}, nil
	}
	if in.IdempotencyKey != "" {
		if i, ok := a.byKey[in.IdempotencyKey]; ok {
			if a.loseNext > 0 { // its replay's reply is lost too
				a.loseNext--
				return nil, booking{}, errReplyLost
			}
			return nil, a.bookings[i], nil
		}
	}
	b := booking{ID: fmt.Sprintf("BK-%d", len(a.bookings)+1), Flight: in.Flight, Passenger: in.Passenger, Reference: in.Reference}
	a.bookings = append(a.bookings, b)
	if in.IdempotencyKey != "" {
		if a.byKey == nil {
			a.byKey = map[string]int{}
		}
		a.byKey[in.IdempotencyKey] = len(a.bookings) - 1
	}
	if a.loseNext > 0 {
		a.loseNext--
		return nil, booking{}, errReplyLost
	}
	return nil, b, nil
}

func (a *airline) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.bookings)
}

func (a *airline) setFindRefDown(down bool) {
	a.mu.Lock()
	a.findRefDown = down
	a.mu.Unlock()
}

func (a *airline) lose(n int) {
	a.mu.Lock()
	a.loseNext = n
	a.mu.Unlock()
}

// server builds the airline's MCP server.
func (a *airline) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "book", Description: "Book one seat."},
		func(ctx context.Context, req *mcp.CallToolRequest, in bookIn) (*mcp.CallToolResult, booking, error) {
			a.mu.Lock()
			a.traceparents = append(a.traceparents, fmt.Sprint(req.Params.Meta["traceparent"]))
			a.mu.Unlock()
			if tok := req.Params.GetProgressToken(); tok != nil {
				for i := 1; i <= 2; i++ {
					req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 2, Message: "booking"})
				}
			}
			return a.book(in)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "book_noted", Description: "Book one seat, keeping a client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in bookIn) (*mcp.CallToolResult, booking, error) {
			return a.book(in)
		})
	type findIn struct {
		Reference string `json:"client_reference"`
	}
	type found struct {
		Found   bool     `json:"found"`
		Booking *booking `json:"booking,omitempty"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "find_booking", Description: "Find a booking by its client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, found, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.findRefDown {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "bookings are being migrated; try later"}}}, found{}, nil
			}
			for _, b := range a.bookings {
				if b.Reference == in.Reference {
					return nil, found{Found: true, Booking: &b}, nil
				}
			}
			return nil, found{}, nil
		})
	type byIn struct {
		Flight    string `json:"flight"`
		Passenger string `json:"passenger"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "find_by_passenger", Description: "Find a booking by flight and passenger."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in byIn) (*mcp.CallToolResult, found, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.findDown {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "search is down"}}}, found{}, nil
			}
			for _, b := range a.bookings {
				if b.Flight == in.Flight && b.Passenger == in.Passenger {
					return nil, found{Found: true, Booking: &b}, nil
				}
			}
			return nil, found{}, nil
		})
	type flightsIn struct {
		From string `json:"from"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "list_flights", Description: "List flights."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in flightsIn) (*mcp.CallToolResult, map[string][]string, error) {
			return nil, map[string][]string{"flights": {"TP1234", "TP1235"}}, nil
		})
	return s
}

// guardConfig is the guard's configuration in front of the airline.
const guardConfig = `{
  "principal": "ana@example.com",
  "mcpServers": {
    "airline": {
      "command": "airline-mcp",
      "tools": {
        "book": {"class": "keyed", "key_argument": "idempotency_key"},
        "book_noted": {"class": "reconcilable", "ref_argument": "client_reference",
          "check": {"tool": "find_booking", "arguments": {"client_reference": "${ref}"},
            "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
        "find_booking": {"class": "read_only"},
        "list_flights": {"class": "read_only"}
      }
    }
  }
}`

// configWith returns guardConfig with book's settings replaced (unless
// book is "") and the top-level settings extra added (unless "").
func configWith(book, extra string) string {
	cfg := guardConfig
	if book != "" {
		cfg = strings.Replace(cfg, `"book": {"class": "keyed", "key_argument": "idempotency_key"}`, `"book": `+book, 1)
	}
	if extra != "" {
		cfg = strings.Replace(cfg, `"principal": "ana@example.com",`, `"principal": "ana@example.com", `+extra+`,`, 1)
	}
	return cfg
}

// rig is a guard in front of an airline, and a client of the guard, all
// over in-memory MCP transports.
type rig struct {
	t       testing.TB
	airline *airline
	guard   *mcpguard.Guard
	client  *mcp.ClientSession
	up      *mcp.Server // the airline's server, served anew on each connection
}

type rigOptions struct {
	config string
	store  agenttool.Store
	path   string // a bbolt file, when store is nil
	tune   func(tool string, o *agenttool.Options)
}

func newRig(t testing.TB, a *airline, ro rigOptions) *rig {
	t.Helper()
	if ro.config == "" {
		ro.config = guardConfig
	}
	cfg, err := mcpguard.ParseConfig([]byte(ro.config))
	if err != nil {
		t.Fatal(err)
	}
	if ro.store == nil {
		if ro.path == "" {
			ro.path = filepath.Join(t.TempDir(), "guard.db")
		}
		cfg.Store.Path = ro.path
	}
	r := &rig{t: t, airline: a, up: a.server()}
	tune := func(tool string, o *agenttool.Options) {
		o.Retry = agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxElapsed: time.Second}
		o.WaitTimeout = time.Second
		if ro.tune != nil {
			ro.tune(tool, o)
		}
	}
	g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{
		Store: ro.store, Transport: serving(r.up), Tune: tune, Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.guard = g
	t.Cleanup(func() { g.Close() })
	r.client = connect(t, g)
	return r
}

// connect connects a client to the guard's front.
func connect(t testing.TB, g *mcpguard.Guard) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool of the guard as a client does, and returns its result
// and the retrysafe envelope in its _meta.
func (r *rig) call(name string, args any) (*mcp.CallToolResult, envelope.Envelope) {
	r.t.Helper()
	return call(r.t, r.client, name, args, nil)
}

func call(t testing.TB, cs *mcp.ClientSession, name string, args any, meta mcp.Meta) (*mcp.CallToolResult, envelope.Envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("calling %s through the guard: %v", name, err)
	}
	var env envelope.Envelope
	if raw, ok := res.Meta[mcptool.MetaEnvelope]; ok {
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatalf("the envelope in _meta does not read: %v: %s", err, b)
		}
	}
	return res, env
}

func resultText(res *mcp.CallToolResult) string {
	b, _ := json.Marshal(res.StructuredContent)
	return string(b)
}

// counter is a plain MCP server with one effectful tool, send, that
// counts what it sends: a third party's server, which knows nothing of
// retrysafe.
type counter struct {
	mu   sync.Mutex
	sent []string
}

type sendIn struct {
	To   string `json:"to"`
	Text string `json:"text"`
}

func (c *counter) server(tools ...string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	for _, name := range tools {
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: "Send a message."},
			func(ctx context.Context, _ *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, map[string]string, error) {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.sent = append(c.sent, name+": "+in.To+": "+in.Text)
				return nil, map[string]string{"sent_by": name}, nil
			})
	}
	return s
}

func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sent)
}

// serving is an Options.Transport that serves up in memory, anew on each
// connection of the guard.
func serving(up *mcp.Server) func(string, *mcpguard.Server) (mcp.Transport, error) {
	return func(string, *mcpguard.Server) (mcp.Transport, error) {
		ct, st := mcp.NewInMemoryTransports()
		if _, err := up.Connect(context.Background(), st, nil); err != nil {
			return nil, err
		}
		return ct, nil
	}
}

// guardOver starts a guard with config in front of up (see serving), or,
// with up nil, of the servers config reaches itself (by URL); its store a
// bbolt file of the test's, closed when the test ends. opts may set
// anything but Transport; its Logger defaults to none.
func guardOver(t testing.TB, up *mcp.Server, config string, opts mcpguard.Options) *mcpguard.Guard {
	t.Helper()
	cfg, err := mcpguard.ParseConfig([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
	if up != nil {
		opts.Transport = serving(up)
	}
	if opts.Logger == nil {
		opts.Logger = discard()
	}
	g, err := mcpguard.New(context.Background(), cfg, &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}
