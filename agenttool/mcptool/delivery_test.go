package mcptool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/mcpfault"
	"github.com/retrysafe/retrysafe/reconcile"
)

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

// serverKind is an MCP server behind the proxy.
type serverKind struct {
	name      string
	envelopes bool // a retrysafe server (mcptool.Register), or a plain one
	stateless bool
}

var serverKinds = []serverKind{
	{"retrysafe, stateful", true, false},
	{"retrysafe, stateless", true, true},
	{"plain, stateful", false, false},
	{"plain, stateless", false, true},
}

// duplicates reports whether the proxy's fault makes a plain server run
// one request twice: a destination without a key cannot be helped by any
// client when a proxy resends on its own.
func (k serverKind) duplicates(f fault) bool {
	if k.envelopes {
		return false
	}
	switch f {
	case retryAfterTimeout:
		return true // the first copy is over: the second is a new request to the server
	case duplicateDelivery, sessionLossAfter:
		return k.stateless // no session to refuse the second copy
	}
	return false
}

// Through a proxy that delivers a call twice, retries it after its own
// timeout, loses its answer or loses the server's session, in front of
// retrysafe and plain servers, stateful and stateless, for every class
// that writes: the model's call, then its reworded call if the first was
// not a success, then the first once more, leave at most one booking, and
// every envelope says what the destination counted.
func TestClient_OneBookingThroughAnyProxyFault(t *testing.T) {
	faultsTried := []fault{duplicateDelivery, retryAfterTimeout, dropResponse, sessionLossBefore, sessionLossAfter}
	for _, kind := range serverKinds {
		for _, f := range faultsTried {
			if kind.duplicates(f) {
				continue
			}
			for _, class := range []agenttool.Class{agenttool.Keyed, agenttool.Reconcilable, agenttool.AtMostOnce} {
				if class == agenttool.Keyed && !kind.envelopes {
					continue // refused: nothing says a plain server replays a resent call
				}
				t.Run(fmt.Sprintf("%s/%s/%v", kind.name, f, class), func(t *testing.T) {
					oneBookingThrough(t, kind, f, class)
				})
			}
		}
	}
}

func oneBookingThrough(t *testing.T, kind serverKind, f fault, class agenttool.Class) {
	d := &desk{}
	var server *mcp.Server
	if kind.envelopes {
		server = newServed(t, d, agenttool.Options{}, nil).server
	} else {
		server = plainServer(d, nil)
	}
	p := &proxy{backends: replicas(server, kind.stateless), fault: f}
	if f == duplicateDelivery && !kind.stateless {
		// The second copy arrives while the first is in the tool.
		d.hold, d.entered = make(chan struct{}), make(chan struct{})
		p.between = func() { <-d.entered }
		p.afterSecond = func() { close(d.hold) }
	}
	dial := dialHTTP(t, newProxy(t, p), "tok-ana")
	cs, err := dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	opts := agenttool.Options{Store: memstore.New(), Class: class, Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond}}
	if class == agenttool.Reconcilable {
		// A truthful reconciler: the desk knows which client reference
		// each booking was made for, and the proxy what is in flight.
		opts.Reconciler = reconcile.Func(func(_ context.Context, ref string) reconcile.Answer {
			if b, ok := d.bookedFor(ref); ok {
				out, _ := json.Marshal(b)
				return reconcile.AppliedWith(out)
			}
			if p.inFlight.Load() > 0 {
				return reconcile.StillPending()
			}
			return reconcile.NotAppliedYet()
		})
	}
	tools, err := mcptool.Tools(context.Background(), cs, mcptool.ClientOptions{Reconnect: dial, ByName: map[string]agenttool.Options{"book_flight": opts}})
	if err != nil {
		t.Fatal(err)
	}
	book := tools[0]

	var envs []envelope.Envelope
	var after []int
	call := func(input string) envelope.Envelope {
		env := book.Invoke(agentCtx(), input)
		p.settle()
		envs, after = append(envs, env), append(after, d.count())
		return env
	}
	first := call(anaSeat)
	if first.Status != envelope.Success {
		call(anaReworded)
	}
	call(anaSeat)
	if class == agenttool.Keyed && first.Status != envelope.Success {
		t.Errorf("a keyed client over a retrysafe server answered %s; want a success: a resend under its key is safe", first)
	}
	for i, env := range envs {
		before := 0
		if i > 0 {
			before = after[i-1]
		}
		if err := env.Validate(); err != nil {
			t.Errorf("envelope %d is invalid: %v", i, err)
		}
		switch {
		case env.Status == envelope.Success && after[i] != 1:
			t.Errorf("envelope %d %s: a success, with %d bookings", i, env, after[i])
		case env.Status == envelope.DefiniteFailure && after[i] != before:
			t.Errorf("envelope %d %s: a definite failure, and the bookings went from %d to %d", i, env, before, after[i])
		case env.Replayed && i == 0:
			t.Errorf("envelope %d %s: replayed, but this call's own request made the booking", i, env)
		}
	}
	if n := d.count(); n > 1 {
		t.Errorf("%d bookings for one action; envelopes %v", n, envs)
	}
}

// watchedSessions gives one session, connected through WatchWrites, and
// says so (mcptool.WritesWatcher).
type watchedSessions struct{ s *mcp.ClientSession }

func (w watchedSessions) Session(context.Context) (*mcp.ClientSession, error) { return w.s, nil }
func (w watchedSessions) Lost(*mcp.ClientSession)                             {}
func (w watchedSessions) WatchesWrites() bool                                 { return true }

// On sessions watched by WatchWrites, a server's "closing" answer, given
// after its tool acted and followed by its end, is an unknown outcome —
// never a call that was not sent, tried again — while a call on a session
// closed before it is not sent. (The SDK answers ErrConnectionClosed for
// both; found by a review of the guard, which sent an at-most-once
// message twice and answered success.)
func TestWatchedSessionsTellAClosingAnswerFromACallNeverSent(t *testing.T) {
	connect := func(t *testing.T, server *mcp.Server) *mcp.ClientSession {
		st, ct := mcp.NewInMemoryTransports()
		ss, err := server.Connect(context.Background(), st, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Close() })
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(), mcptool.WatchWrites(mcpfault.EndsAfterClosingAnswer(ct)), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	tool := func(t *testing.T, cs *mcp.ClientSession) *agenttool.Tool {
		list, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		tool, err := mcptool.NewToolWith(cs, list.Tools[0], agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
			Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond}}, mcptool.ToolOptions{Sessions: watchedSessions{cs}})
		if err != nil {
			t.Fatal(err)
		}
		return tool
	}
	t.Run("a closing answer after the tool acted", func(t *testing.T) {
		d := &desk{}
		book := tool(t, connect(t, plainServer(d, func(n int) error {
			return &jsonrpc.Error{Code: -32004, Message: "server is closing"}
		})))
		env := book.Invoke(agentCtx(), anaSeat)
		if env.Status != envelope.UnknownOutcome || d.count() != 1 {
			t.Errorf("answered %s with %d bookings; want unknown_outcome and 1", env, d.count())
		}
	})
	t.Run("a session closed before the call", func(t *testing.T) {
		d := &desk{}
		cs := connect(t, plainServer(d, nil))
		book := tool(t, cs)
		cs.Close()
		env := book.Invoke(agentCtx(), anaSeat)
		if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeUnavailable || d.count() != 0 {
			t.Errorf("answered %s with %d bookings; want unavailable and none", env, d.count())
		}
	})
}
