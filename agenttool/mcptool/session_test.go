package mcptool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

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

// When connecting again fails, nothing more is sent, and what may have
// landed before stays unknown: never a definite failure that would free
// the action.
func TestClient_FailedReconnectKeepsTheOutcomeUnknown(t *testing.T) {
	for _, f := range []fault{sessionLossBefore, sessionLossAfter} {
		t.Run(f.String(), func(t *testing.T) {
			s := newServed(t, &desk{}, agenttool.Options{}, nil)
			p := &proxy{backends: replicas(s.server, false), fault: f}
			cs := connectHTTP(t, newProxy(t, p), "tok-ana")
			reconnects := 0
			tools, err := mcptool.Tools(context.Background(), cs, mcptool.ClientOptions{
				Reconnect: func(context.Context) (*mcp.ClientSession, error) {
					reconnects++
					return nil, errors.New("dial tcp: connection refused")
				},
				ByName: map[string]agenttool.Options{
					"book_flight": {Store: memstore.New(), Class: agenttool.Keyed, Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond}},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			env := tools[0].Invoke(agentCtx(), anaSeat)
			p.settle()
			if env.Status != envelope.UnknownOutcome || reconnects == 0 || p.calls.Load() != 1 {
				t.Errorf("answered %s after %d reconnects and %d calls sent; want unknown_outcome, and no call sent after the loss",
					env, reconnects, p.calls.Load())
			}
			again := tools[0].Invoke(agentCtx(), anaReworded)
			if s.desk.count() > 1 || again.Status != envelope.UnknownOutcome {
				t.Errorf("the reworded call answered %s with %d bookings; want it held back", again, s.desk.count())
			}
		})
	}
}
