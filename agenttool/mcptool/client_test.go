package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
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

// A hostile (or buggy) server whose tools/list answers the same page with
// a next cursor forever: Tools stops at the repeated tool, promptly,
// rather than listing and guarding it again until the context ends.
func TestTools_AnEndlessListingEnds(t *testing.T) {
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
