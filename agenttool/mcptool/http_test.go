package mcptool_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/envelope"
)

// The server books and the HTTP stream breaks before the response reaches
// the client; the guarded client resends and gets the booking replayed.
// One booking; every envelope, on either side, says what happened.
func TestLostResponseOverHTTP(t *testing.T) {
	for _, mode := range []struct {
		name                    string
		stateless, afterHeaders bool
	}{
		{"stateless", true, false},
		{"stateful", false, false},
		{"stateless/stream ends without the response", true, true},
		{"stateful/stream ends without the response", false, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			s := newServed(t, &desk{}, agenttool.Options{}, nil)
			f := &faults{afterHeaders: mode.afterHeaders}
			f.dropCalls.Store(1)
			srv := httpServer(t, s.server, mode.stateless, false, f)
			book := clientTool(t, connectHTTP(t, srv.URL, "tok-ana"), nil, agenttool.Options{})

			env := book.Invoke(agentCtx(), anaSeat)
			if f.dropped.Load() != 1 {
				t.Fatalf("%d responses were dropped, want 1", f.dropped.Load())
			}
			if n, runs := s.desk.count(), s.desk.runs.Load(); n != 1 || runs != 1 {
				t.Fatalf("%d bookings in %d runs, want 1 in 1", n, runs)
			}
			server := s.envelopes()
			if len(server) != 2 || server[0].Status != envelope.Success || server[0].Replayed ||
				server[1].Status != envelope.Success || !server[1].Replayed {
				t.Fatalf("the server answered %v; want a success (lost), then the same replayed", server)
			}
			if env.Status != envelope.Success || env.Attempts != 2 {
				t.Fatalf("the client's envelope %s; want a success after 2 attempts", env)
			}
			var got booking
			if err := json.Unmarshal(env.Result, &got); err != nil || got.Confirmation != "BK-1001" || got.Principal != "ana" {
				t.Errorf("the client's result %s; want Ana's booking BK-1001", env.Result)
			}
			if string(env.Result) != string(server[0].Result) {
				t.Errorf("the client's result %s differs from the server's %s", env.Result, server[0].Result)
			}
			// The model asks again: the client replays its record, the server
			// is not called.
			again := book.Invoke(agentCtx(), `{"passenger":"Ana Lima","flight":"TP1234","date":"2026-12-12"}`)
			if again.Status != envelope.Success || !again.Replayed || len(s.envelopes()) != 2 {
				t.Errorf("the repeat answered %s after %d server calls; want a local replay", again, len(s.envelopes()))
			}
		})
	}
}

// Two users with their own tokens send the same arguments: two actions,
// and neither sees the other's booking, now or on a repeat.
func TestUsersDoNotShareActions(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, nil)
	srv := httpServer(t, s.server, true, false, nil)
	ana, bob := connectHTTP(t, srv.URL, "tok-ana"), connectHTTP(t, srv.URL, "tok-bob")
	a1, b1 := callRaw(t, ana, anaSeat, nil), callRaw(t, bob, anaSeat, nil)
	a2, b2 := callRaw(t, ana, anaSeat, nil), callRaw(t, bob, anaSeat, nil)
	read := func(env envelope.Envelope) booking {
		t.Helper()
		var b booking
		if env.Status != envelope.Success || json.Unmarshal(env.Result, &b) != nil {
			t.Fatalf("envelope %s", env)
		}
		return b
	}
	if got := read(a1); got.Principal != "ana" || a1.Replayed {
		t.Errorf("Ana's first call answered %s", a1)
	}
	if got := read(b1); got.Principal != "bob" || b1.Replayed || b1.RequestRef == a1.RequestRef {
		t.Errorf("Bob's first call answered %s; want his own new booking", b1)
	}
	if read(a2) != read(a1) || !a2.Replayed || read(b2) != read(b1) || !b2.Replayed {
		t.Errorf("repeats answered %s and %s; want each user's own booking replayed", a2, b2)
	}
	if n := s.desk.count(); n != 2 {
		t.Errorf("%d bookings, want 2", n)
	}
}

// A call without a token runs nothing: the SDK's middleware answers 401,
// and a server that forgot the middleware answers missing_scope.
func TestNoTokenRunsNothing(t *testing.T) {
	t.Run("behind the middleware", func(t *testing.T) {
		s := newServed(t, &desk{}, agenttool.Options{}, nil)
		srv := httpServer(t, s.server, true, false, nil)
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"book_flight","arguments":` + anaSeat + `}}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || s.desk.runs.Load() != 0 {
			t.Errorf("status %d after %d runs; want 401 and nothing run", resp.StatusCode, s.desk.runs.Load())
		}
	})
	t.Run("without the middleware", func(t *testing.T) {
		s := newServed(t, &desk{}, agenttool.Options{}, nil)
		srv := httpServer(t, s.server, true, true, nil)
		raw := connectHTTP(t, srv.URL, "tok-ana") // a token nobody verifies
		env := callRaw(t, raw, anaSeat, nil)
		if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeMissingScope {
			t.Errorf("answered %s; want missing_scope", env)
		}
		// Through a guarded client the model reads the same refusal.
		book := clientTool(t, raw, nil, agenttool.Options{})
		env = book.Invoke(agentCtx(), anaSeat)
		if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeMissingScope || env.Attempts != 1 {
			t.Errorf("the client's envelope %s; want definite_failure missing_scope", env)
		}
		if runs := s.desk.runs.Load(); runs != 0 {
			t.Errorf("the tool ran %d times", runs)
		}
	})
}

// The client sends its request reference in _meta; the server can read it
// for its logs, and it is the client's, not the server's key.
func TestRequestRefTravelsInMeta(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, nil)
	var mu sync.Mutex
	var seen []any
	s.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
				mu.Lock()
				seen = append(seen, p.Meta[mcptool.MetaRequestRef])
				mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	srv := httpServer(t, s.server, true, false, nil)
	book := clientTool(t, connectHTTP(t, srv.URL, "tok-ana"), nil, agenttool.Options{})
	env := book.Invoke(agentCtx(), anaSeat)
	server := s.envelopes()
	mu.Lock()
	defer mu.Unlock()
	if env.Status != envelope.Success || len(seen) != 1 || seen[0] != env.RequestRef {
		t.Fatalf("the server saw %v in _meta for the client's %s", seen, env)
	}
	if len(server) != 1 || server[0].RequestRef == env.RequestRef {
		t.Errorf("the server's reference %v should be its own, not the client's %s", server, env.RequestRef)
	}
}

// A client that reconnects gets a new MCP session id; its resent call is
// still the same action, because the default session does not follow the
// connection.
func TestResendOnANewMCPSessionIsReplayed(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, nil)
	srv := httpServer(t, s.server, false, false, nil) // stateful: every connection has its session id
	before, after := connectHTTP(t, srv.URL, "tok-ana"), connectHTTP(t, srv.URL, "tok-ana")
	if before.ID() == "" || before.ID() == after.ID() {
		t.Fatalf("MCP session ids %q and %q; want two", before.ID(), after.ID())
	}
	first, again := callRaw(t, before, anaSeat, nil), callRaw(t, after, anaSeat, nil)
	if first.Status != envelope.Success || !again.Replayed || again.RequestRef != first.RequestRef || s.desk.count() != 1 {
		t.Errorf("answered %s, then on a new session %s; want the first booking replayed", first, again)
	}
}
