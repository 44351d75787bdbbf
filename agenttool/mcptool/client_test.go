package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// What the server's envelope says, the client's envelope says: its status,
// and its code.
func TestClientKeepsTheServersOutcome(t *testing.T) {
	for _, tc := range []struct {
		name       string
		class      agenttool.Class // of the server's tool
		fail       func(n int) error
		wantStatus envelope.Status
		wantCode   string
		wantRuns   int64
	}{
		{"success", agenttool.Keyed, nil, envelope.Success, "", 1},
		{"definite, with the server's code", agenttool.Keyed,
			func(int) error { return envelope.MarkDefinite(errors.New("the flight is full"), "sold_out") },
			envelope.DefiniteFailure, "sold_out", 1},
		{"unknown stays unknown, and is not run again", agenttool.AtMostOnce,
			func(int) error { return envelope.MarkUnknown(errors.New("read: connection reset by peer")) },
			envelope.UnknownOutcome, envelope.CodeOutcomeUnknown, 1},
		{"unavailable is retried, then reported unavailable", agenttool.Keyed,
			func(int) error { return envelope.MarkTransient(errors.New("503")) },
			envelope.DefiniteFailure, envelope.CodeUnavailable, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServed(t, &desk{fail: tc.fail}, agenttool.Options{Class: tc.class}, &mcptool.ServerOptions{Principal: connectionUser})
			book := clientTool(t, connectInMemory(t, s.server, "ana", nil), nil, agenttool.Options{})
			env := book.Invoke(agentCtx(), anaSeat)
			if env.Status != tc.wantStatus || (tc.wantCode != "" && env.Error.Code != tc.wantCode) {
				t.Fatalf("the client's envelope %s; want %s %s", env, tc.wantStatus, tc.wantCode)
			}
			if runs := s.desk.runs.Load(); runs != tc.wantRuns {
				t.Errorf("the server's tool ran %d times, want %d", runs, tc.wantRuns)
			}
			if env.Status != envelope.Success {
				last := s.envelopes()[len(s.envelopes())-1]
				if !strings.Contains(env.Error.Message, string(last.Status)) {
					t.Errorf("the client's message %q does not say what the server answered (%s)", env.Error.Message, last)
				}
			}
		})
	}
}

// A server that could do nothing asks to try later; the client does not
// record that as a failure, so the same action runs once the server is
// back.
func TestUnavailableServerLeavesTheActionFree(t *testing.T) {
	d := &desk{fail: func(n int) error {
		if n <= 9 {
			return envelope.MarkTransient(errors.New("503"))
		}
		return nil
	}}
	s := newServed(t, d, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	book := clientTool(t, connectInMemory(t, s.server, "ana", nil), nil, agenttool.Options{})
	first := book.Invoke(agentCtx(), anaSeat)
	later := book.Invoke(agentCtx(), anaSeat)
	if first.Status != envelope.DefiniteFailure || first.Next != envelope.Wait || later.Status != envelope.Success || later.Replayed {
		t.Errorf("envelopes %s then %s; want unavailable (wait), then a fresh success", first, later)
	}
	if n := d.count(); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
}

// The client's guarded tool on other MCP servers: a tool the server does
// not have, a tool error, a plain result.
func TestClientOnOtherServers(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "plain", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "quote", Description: "Quote a fare.", InputSchema: json.RawMessage(
		`{"type":"object","required":["flight"],"properties":{"flight":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if strings.Contains(string(req.Params.Arguments), "XX0") {
				res := &mcp.CallToolResult{}
				res.SetError(errors.New("no such flight"))
				return res, nil
			}
			out := `{"flight":"TP1234","cents":9007199254740993}` // not exact as a float64
			return &mcp.CallToolResult{StructuredContent: json.RawMessage(out), Content: []mcp.Content{&mcp.TextContent{Text: out}}}, nil
		})
	cs := connectInMemory(t, server, "", nil)
	tools, err := mcptool.Tools(context.Background(), cs, mcptool.ClientOptions{
		ToolErrors: mcptool.DefiniteToolErrors, // this server says isError only when it did nothing
		Choose: func(*mcp.Tool) (agenttool.Options, bool) {
			return agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce}, true
		},
	})
	if err != nil || len(tools) != 1 {
		t.Fatalf("tools %v, %v", tools, err)
	}
	quote := tools[0]
	env := quote.Invoke(agentCtx(), `{"flight":"TP1234"}`)
	if env.Status != envelope.Success || string(env.Result) != `{"flight":"TP1234","cents":9007199254740993}` {
		t.Errorf("a plain result answered %s; want the server's structured content, exactly", env)
	}
	env = quote.Invoke(agentCtx(), `{"flight":"XX0"}`)
	if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeRejected || !strings.Contains(env.Error.Message, "no such flight") {
		t.Errorf("a tool error answered %s; want definite_failure rejected with its text", env)
	}
	// Without ToolErrors, the same tool error may have come after the tool
	// acted: unknown.
	unsure, err := mcptool.NewTool(cs, &mcp.Tool{Name: "quote", InputSchema: map[string]any{"type": "object", "required": []any{"flight"}}},
		agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env = unsure.Invoke(agentCtx(), `{"flight":"XX0"}`)
	if env.Status != envelope.UnknownOutcome || env.Attempts != 1 || !strings.Contains(env.Error.Message, "no such flight") {
		t.Errorf("a tool error, by default, answered %s; want unknown_outcome, with its text", env)
	}
	// A tool the server does not have (renamed since it was listed, say):
	// the SDK's invalid-params refusal looks the same as a typed handler's
	// *jsonrpc.Error after it acted, so a server without envelopes proves
	// nothing by it (TestClient_RefusalOfAnEnvelopeServerIsDefinite has the
	// server that does).
	missing, err := mcptool.NewTool(cs, &mcp.Tool{Name: "cancel_flight", InputSchema: map[string]any{
		"type": "object", "required": []any{"confirmation"}, "properties": map[string]any{"confirmation": map[string]any{"type": "string"}},
	}}, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env = missing.Invoke(agentCtx(), `{"confirmation":"BK-1001"}`)
	if env.Status != envelope.UnknownOutcome || env.Attempts != 1 || !strings.Contains(env.Error.Message, `unknown tool "cancel_flight"`) {
		t.Errorf("an unknown tool answered %s; want unknown_outcome after one attempt, with the server's message", env)
	}
}

// A call the connection could not send is transient: retried, then
// reported unavailable, never unknown.
func TestUnsentCallsAreTransient(t *testing.T) {
	t.Run("closed session", func(t *testing.T) {
		s := newServed(t, &desk{}, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
		cs := connectInMemory(t, s.server, "ana", nil)
		book := clientTool(t, cs, nil, agenttool.Options{})
		cs.Close()
		env := book.Invoke(agentCtx(), anaSeat)
		if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeUnavailable || env.Attempts != 3 {
			t.Errorf("answered %s; want unavailable after 3 attempts", env)
		}
	})
	t.Run("refused dial", func(t *testing.T) {
		s := newServed(t, &desk{}, agenttool.Options{}, nil)
		srv := httpServer(t, s.server, true, false, nil)
		book := clientTool(t, connectHTTP(t, srv.URL, "tok-ana"), nil, agenttool.Options{})
		srv.Close() // nothing listens any more
		env := book.Invoke(agentCtx(), anaSeat)
		if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeUnavailable || env.Attempts != 3 {
			t.Errorf("answered %s; want unavailable after 3 attempts", env)
		}
		if runs := s.desk.runs.Load(); runs != 0 {
			t.Errorf("the tool ran %d times", runs)
		}
	})
}

// A deadline after the call was sent is unknown; the resend finds out.
func TestDeadlineAfterSendingIsUnknown(t *testing.T) {
	d := &desk{hold: make(chan struct{})}
	s := newServed(t, d, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	store := memstore.New()
	book := clientTool(t, connectInMemory(t, s.server, "ana", nil), store,
		agenttool.Options{AttemptTimeout: 50 * time.Millisecond, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	first := book.Invoke(agentCtx(), anaSeat)
	if first.Status != envelope.UnknownOutcome || first.Error.Code != envelope.CodeOutcomeUnknown {
		t.Fatalf("answered %s; want unknown_outcome", first)
	}
	close(d.hold)
	again := book.Invoke(agentCtx(), anaSeat)
	if again.Status != envelope.Success || again.RequestRef != first.RequestRef {
		t.Errorf("the resend answered %s; want the same action, a success", again)
	}
	if n := d.count(); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
}

// The in-memory connection breaks with the response on its way: the client
// cannot know, and says unknown. The application connects again and builds
// the tools on the new session with the same store: the same action is
// resent and replayed.
func TestLostResponseInMemoryThenReconnect(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	store := memstore.New()
	book := clientTool(t, connectInMemory(t, s.server, "ana", cutFirstCallResponse), store, agenttool.Options{})
	first := book.Invoke(agentCtx(), anaSeat)
	if first.Status != envelope.UnknownOutcome {
		t.Fatalf("answered %s; want unknown_outcome: the booking may have happened", first)
	}
	if n := s.desk.count(); n != 1 {
		t.Fatalf("%d bookings, want 1 (the lost one)", n)
	}
	book = clientTool(t, connectInMemory(t, s.server, "ana", nil), store, agenttool.Options{})
	again := book.Invoke(agentCtx(), anaSeat)
	server := s.envelopes()
	if again.Status != envelope.Success || again.RequestRef != first.RequestRef {
		t.Fatalf("after reconnecting, answered %s; want the same action, a success", again)
	}
	if last := server[len(server)-1]; !last.Replayed || string(last.Result) != string(again.Result) {
		t.Errorf("the server answered %s; want its first booking replayed", last)
	}
	if n, runs := s.desk.count(), s.desk.runs.Load(); n != 1 || runs != 1 {
		t.Errorf("%d bookings in %d runs, want 1 in 1", n, runs)
	}
}

// NewTool takes the identifying fields from the listed schema, and refuses
// what it cannot guard.
func TestNewToolOptions(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	cs := connectInMemory(t, s.server, "ana", nil)
	store := memstore.New()
	noRequired := &mcp.Tool{Name: "note", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}}
	for _, tc := range []struct {
		name string
		tool *mcp.Tool
		opts agenttool.Options
	}{
		{"no required property", noRequired, agenttool.Options{Store: store, Class: agenttool.AtMostOnce}},
		{"text input", noRequired, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, TextInput: true}},
		{"not an object schema", &mcp.Tool{Name: "odd", InputSchema: map[string]any{"type": "string"}}, agenttool.Options{Store: store, Class: agenttool.AtMostOnce}},
		{"keyed, without envelopes", noRequired, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"text"}}},
	} {
		if _, err := mcptool.NewTool(cs, tc.tool, tc.opts, nil); !errors.Is(err, agenttool.ErrInvalidOptions) {
			t.Errorf("%s: err %v, want ErrInvalidOptions", tc.name, err)
		}
	}
	if _, err := mcptool.NewTool(cs, noRequired, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, IdentifyingFields: []string{"text"}}, nil); err != nil {
		t.Errorf("with IdentifyingFields given: %v", err)
	}
	if _, err := mcptool.Tools(context.Background(), cs, mcptool.ClientOptions{ByName: map[string]agenttool.Options{"cancel_flight": {}}}); err == nil ||
		!strings.Contains(err.Error(), "cancel_flight") {
		t.Errorf("a name the server does not list: %v", err)
	}
	// The required fields identify the action: a member the tool ignores
	// makes no new action, and is refused as other input.
	book := clientTool(t, cs, store, agenttool.Options{})
	first := book.Invoke(agentCtx(), anaSeat)
	variant := book.Invoke(agentCtx(), `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima","seat_pref":"aisle"}`)
	if first.Status != envelope.Success || variant.Error == nil || variant.Error.Code != envelope.CodeKeyReused || s.desk.count() != 1 {
		t.Errorf("envelopes %s then %s; want a booking, then key_reused_with_different_input", first, variant)
	}
	if !strings.Contains(book.Description(), `"passenger"`) {
		t.Errorf("the model is not shown the input members: %q", book.Description())
	}
	if strings.Count(book.Description(), "Returns a JSON envelope") != 1 {
		t.Errorf("the envelope hint appears more or less than once: %q", book.Description())
	}
}

// anaReworded is the model's reworded call for Ana's seat after an unknown
// outcome: another key, the same logical action.
const anaReworded = `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Maria Lima"}`

// A proxy delivers one tools/call twice to a stateful server. The first
// copy books; the server refuses the second (HTTP 400, JSON-RPC -32600
// "duplicate in-flight request ID"), and the proxy hands the client that
// refusal. It refused a delivery, not the action: the client's envelope is
// never a definite failure, and the model's reworded call books nothing
// more.
func TestClient_DuplicateDeliveryIsNotADefiniteFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server func(t *testing.T, d *desk) *mcp.Server
		class  agenttool.Class
	}{
		{"retrysafe server, keyed client", func(t *testing.T, d *desk) *mcp.Server {
			return newServed(t, d, agenttool.Options{}, nil).server
		}, agenttool.Keyed},
		{"plain server, at-most-once client", func(_ *testing.T, d *desk) *mcp.Server { return plainServer(d, nil) }, agenttool.AtMostOnce},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &desk{hold: make(chan struct{}), entered: make(chan struct{})}
			p := &proxy{backends: replicas(tc.server(t, d), false), fault: duplicateDelivery,
				between: func() { <-d.entered }, afterSecond: func() { close(d.hold) }}
			book := clientTool(t, connectHTTP(t, newProxy(t, p), "tok-ana"), nil, agenttool.Options{Class: tc.class})

			env := book.Invoke(agentCtx(), anaSeat)
			p.settle()
			if p.delivered.Load() < 2 || d.count() != 1 {
				t.Fatalf("premise: %d deliveries, %d bookings; want the call delivered twice and booked once", p.delivered.Load(), d.count())
			}
			switch {
			case env.Status == envelope.DefiniteFailure:
				t.Fatalf("the seat is booked, but the client's envelope says %s", env)
			case tc.class == agenttool.Keyed && (env.Status != envelope.Success || env.Replayed):
				t.Fatalf("the keyed client answered %s; want the resend's success (the server replays the booking)", env)
			case env.Status == envelope.UnknownOutcome:
				again := book.Invoke(agentCtx(), anaReworded)
				if again.Status != envelope.UnknownOutcome || again.Error.Code != envelope.CodeEarlierUnknown {
					t.Errorf("the reworded call answered %s; want it held back by the unknown fence", again)
				}
			}
			if n := d.count(); n != 1 {
				t.Errorf("%d bookings for one action", n)
			}
		})
	}
}

// A plain server's typed handler books, then returns a *jsonrpc.Error,
// which the SDK passes straight through as the call's error. For a server
// that does not answer with retrysafe envelopes no JSON-RPC code proves
// that nothing ran: the client says unknown, runs nothing again, and holds
// back the model's reworded call.
func TestClient_HandlerJSONRPCErrorAfterItActedIsNotADefiniteFailure(t *testing.T) {
	for _, code := range []int64{jsonrpc.CodeInvalidParams, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidRequest, jsonrpc.CodeParseError,
		mcp.CodeUnsupportedProtocolVersion, -32004 /* server closing */, -32003 /* client closing */, -32005 /* rejected by transport */} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			d := &desk{}
			server := plainServer(d, func(int) error { return &jsonrpc.Error{Code: code, Message: "loyalty number not recognised"} })
			book := clientTool(t, connectInMemory(t, server, "", nil), nil, agenttool.Options{Class: agenttool.AtMostOnce})
			first := book.Invoke(agentCtx(), anaSeat)
			if first.Status != envelope.UnknownOutcome {
				t.Errorf("the handler booked, then answered JSON-RPC %d; the client's envelope says %s, want unknown_outcome", code, first)
			}
			again := book.Invoke(agentCtx(), anaReworded)
			if n := d.count(); n != 1 {
				t.Fatalf("%d bookings for one action (envelopes %s, then %s)", n, first, again)
			}
			if again.Status != envelope.UnknownOutcome || again.Error.Code != envelope.CodeEarlierUnknown {
				t.Errorf("the reworded call answered %s; want it held back by the unknown fence", again)
			}
		})
	}
}

// A proxy retries a tools/call after its own timeout; a stateless
// retrysafe server books on the first copy and replays to the second. The
// client's own request made the only booking: its envelope is an ordinary
// success, not a replay of "an earlier request".
func TestClient_OwnDuplicatedRequestIsNotReportedAsAReplay(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, nil)
	p := &proxy{backends: replicas(s.server, true), fault: retryAfterTimeout}
	book := clientTool(t, connectHTTP(t, newProxy(t, p), "tok-ana"), nil, agenttool.Options{})
	env := book.Invoke(agentCtx(), anaSeat)
	server := s.envelopes()
	if len(server) != 2 || server[0].Replayed || !server[1].Replayed || s.desk.count() != 1 {
		t.Fatalf("premise: the server answered %v with %d bookings; want a booking, then its replay", server, s.desk.count())
	}
	if env.Status != envelope.Success || env.Replayed || env.Note != "" || env.Attempts != 1 {
		t.Errorf("the client's envelope %s; want an ordinary success: its own request booked", env)
	}
}

// The server's MCP session is gone (a restart, a failover to a replica
// that does not know it) and it answers 404 "session not found". A keyed
// client connects again through ClientOptions.Reconnect and resends under
// the same key: the server runs the booking once, or replays it. One
// booking, a success.
func TestClient_SessionLossIsResentOnANewSession(t *testing.T) {
	for _, f := range []fault{sessionLossBefore, sessionLossAfter} {
		t.Run(f.String(), func(t *testing.T) {
			s := newServed(t, &desk{}, agenttool.Options{}, nil)
			p := &proxy{backends: replicas(s.server, false), fault: f}
			url := newProxy(t, p)
			dial := dialHTTP(t, url, "tok-ana")
			cs, err := dial(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			tools, err := mcptool.Tools(context.Background(), cs, mcptool.ClientOptions{Reconnect: dial, ByName: map[string]agenttool.Options{
				"book_flight": {Store: memstore.New(), Class: agenttool.Keyed, Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			env := tools[0].Invoke(agentCtx(), anaSeat)
			p.settle()
			if env.Status != envelope.Success || env.Attempts != 2 {
				t.Errorf("answered %s; want a success after a resend on a new session", env)
			}
			if n := s.desk.count(); n != 1 {
				t.Errorf("%d bookings, want 1", n)
			}
			// The next action goes over the new session at once.
			next := tools[0].Invoke(agenttool.WithScope(context.Background(), "tenant-1/agent", "conversation-2"),
				`{"flight":"TP1234","date":"2026-12-12","passenger":"Rui Costa"}`)
			if next.Status != envelope.Success || next.Attempts != 1 || s.desk.count() != 2 {
				t.Errorf("the next action answered %s; want a success at the first attempt", next)
			}
		})
	}
}

// A server that does not answer with envelopes may have acted before its
// session was lost: an at-most-once client says unknown, and goes on with
// other actions over a new session.
func TestClient_SessionLossIsUnknownForAnAtMostOnceTool(t *testing.T) {
	for _, f := range []fault{sessionLossBefore, sessionLossAfter} {
		t.Run(f.String(), func(t *testing.T) {
			d := &desk{}
			p := &proxy{backends: replicas(plainServer(d, nil), false), fault: f}
			dial := dialHTTP(t, newProxy(t, p), "tok-ana")
			cs, err := dial(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			tools, err := mcptool.Tools(context.Background(), cs, mcptool.ClientOptions{Reconnect: dial, ByName: map[string]agenttool.Options{
				"book_flight": {Store: memstore.New(), Class: agenttool.AtMostOnce},
			}})
			if err != nil {
				t.Fatal(err)
			}
			env := tools[0].Invoke(agentCtx(), anaSeat)
			p.settle()
			booked := d.count()
			if env.Status != envelope.UnknownOutcome || booked > 1 {
				t.Errorf("answered %s with %d bookings; want unknown_outcome", env, booked)
			}
			next := tools[0].Invoke(agenttool.WithScope(context.Background(), "tenant-1/agent", "conversation-2"),
				`{"flight":"TP1234","date":"2026-12-12","passenger":"Rui Costa"}`)
			if next.Status != envelope.Success || d.count() != booked+1 {
				t.Errorf("the next action answered %s; want a success over the new session", next)
			}
		})
	}
}

// A call the client never sent, on a session closed before it, goes on a
// new session when ClientOptions.Reconnect can make one: it is safe for
// any class.
func TestClient_UnsentCallGoesOnANewSession(t *testing.T) {
	d := &desk{}
	srv := httpServer(t, plainServer(d, nil), false, false, nil)
	dial := dialHTTP(t, srv.URL, "tok-ana")
	cs, err := dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tools, err := mcptool.Tools(context.Background(), cs, mcptool.ClientOptions{Reconnect: dial, ByName: map[string]agenttool.Options{
		"book_flight": {Store: memstore.New(), Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cs.Close()
	env := tools[0].Invoke(agentCtx(), anaSeat)
	if env.Status != envelope.Success || env.Attempts != 2 || d.count() != 1 {
		t.Errorf("answered %s with %d bookings; want a success on a new session, at the second attempt", env, d.count())
	}
}

// A retrysafe server's tool never answers with a JSON-RPC error: a
// refusal code in its answer is the SDK's, before any tool ran (here, a
// tool it does not have), and every delivery of the request meets it.
func TestClient_RefusalOfAnEnvelopeServerIsDefinite(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	cs := connectInMemory(t, s.server, "ana", nil)
	var listed *mcp.Tool
	for tl, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		listed = tl
	}
	renamed := *listed
	renamed.Name = "book_flight_v2" // renamed on the server since it was listed, say
	gone, err := mcptool.NewTool(cs, &renamed, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := gone.Invoke(agentCtx(), anaSeat)
	if env.Status != envelope.DefiniteFailure || env.Error.Code != "invalid_params" || env.Attempts != 1 || s.desk.runs.Load() != 0 {
		t.Errorf("answered %s; want definite_failure invalid_params after one attempt", env)
	}
}
