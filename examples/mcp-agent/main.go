// Command mcp-agent: an agent books one seat through a tool of an MCP
// server, with retrysafe on both sides of the Model Context Protocol.
//
// The program starts an MCP server over streamable HTTP on loopback, behind
// the SDK's bearer-token middleware, that serves book_flight guarded by
// retrysafe (agenttool/mcptool.Register): the principal is the user the
// verified token names. A langchaingo agent reaches it through
// agenttool/mcptool.Tools, which guards the listed tool on the client side
// too. When the response to a call is lost, the client resends it and the
// server replays the booking it made: one booking. When a proxy delivers
// the call twice and the server refuses the second copy, the client knows
// that this refused a delivery, not the booking: it resends, and the
// server replays the booking the first copy made.
//
//	go run ./examples/mcp-agent                          # offline, fault lost-response
//	go run ./examples/mcp-agent -fault duplicate-delivery
//	go run ./examples/mcp-agent -fault unauthenticated
//	go run ./examples/mcp-agent -h                       # flags and faults
//
// -db is the agent's store; the MCP server keeps its own beside it, in
// PATH.server.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

var example = demo.Example{
	Name: "mcp-agent",
	Faults: []demo.Fault{
		{Name: "lost-response", Help: "the server books, then the HTTP connection breaks before the response reaches the client"},
		{Name: "duplicate-delivery", Help: "a proxy sends the first tools/call twice; the server (stateful) books on the first copy and refuses the second as a duplicate in-flight request, and the client gets that refusal"},
		{Name: "none", Help: "everything works"},
		{Name: "unauthenticated", Help: "the user has not signed in: the call carries no token, and nothing runs"},
	},
	Prompt:    "Book Ana Lima on TP1234 on 12 December.",
	Principal: "tenant-42/user-7",
	Session:   "conversation-12",
	Label:     "Sam Diaz, lunch planning",
	Setup:     setup,
	Script:    demo.BookFlight,
}

func main() { demo.Main(example) }

func setup(ctx context.Context, env *demo.Env) (*demo.Scenario, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(env.Out, "  "+format+"\n", args...) }
	server, err := startMCPServer(env.Fault, env.DB+".server", logf)
	if err != nil {
		return nil, err
	}
	store, err := boltstore.Open(env.DB, nil) // the agent's own store
	if err != nil {
		server.close()
		return nil, err
	}
	users := map[string]string{"tenant-42/user-7": "user-9c1d"}
	if env.Fault == "unauthenticated" {
		users = nil
	}
	app := "app-7f3a"
	if env.Fault == "duplicate-delivery" {
		// A stateful server binds its MCP session to the user who opened
		// it: the session is the signed-in user's.
		app = users["tenant-42/user-7"]
	}
	transport := &tokens{base: http.DefaultTransport.(*http.Transport).Clone(), app: app, users: users, log: logf}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcp-agent", Version: "1.0.0"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: server.url, HTTPClient: &http.Client{Transport: transport}}, nil)
	if err != nil {
		store.Close()
		server.close()
		return nil, err
	}
	closeAll := func() { session.Close(); transport.base.CloseIdleConnections(); store.Close(); server.close() }
	guarded, err := mcptool.Tools(ctx, session, mcptool.ClientOptions{ByName: map[string]agenttool.Options{
		"book_flight": {
			Store:          store,
			Class:          agenttool.Keyed, // a resent call is replayed by the server
			AttemptTimeout: 5 * time.Second,
			Retry:          agenttool.RetryPolicy{InitialInterval: 50 * time.Millisecond},
			Hooks: agenttool.Hooks{Attempt: func(_ context.Context, e agenttool.AttemptEvent) {
				if e.Err != nil {
					logf("mcp client: %v", e.Err)
				}
			}},
		},
	}})
	if err != nil {
		closeAll()
		return nil, err
	}
	return &demo.Scenario{
		Tools:   guarded,
		Effects: server.service.count,
		Final:   func(w io.Writer) { fmt.Fprintf(w, "bookings: %d\n", server.service.count()) },
		Close:   closeAll,
	}, nil
}

// tokens is the agent application's HTTP transport to the MCP server. A
// guarded tool's call, made for the user of its trusted scope, carries that
// user's token and never the application's; anything else (connecting,
// listing tools) carries the application's own. The SDK
// reports HTTP statuses as text, so a 401 or 403 is turned into an error
// marked definite here: the server's middleware refused the request
// before anything ran.
type tokens struct {
	base  *http.Transport
	app   string
	users map[string]string // principal → bearer token
	log   func(string, ...any)
}

func (t *tokens) RoundTrip(r *http.Request) (*http.Response, error) {
	token := t.app
	if call, ok := agenttool.CallInfoFrom(r.Context()); ok {
		if token = t.users[call.Scope.Principal]; token == "" {
			t.log("mcp client: %s has not signed in: the call goes without a token", call.Scope.Principal)
		}
	}
	r = r.Clone(r.Context())
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil || (resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden) {
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	return nil, envelope.MarkDefinite(fmt.Errorf("the MCP server refused the request: %s (%s)", resp.Status, strings.TrimSpace(string(body))), "unauthenticated")
}
