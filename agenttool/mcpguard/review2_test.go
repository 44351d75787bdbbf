package mcpguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/retrysafe/retrysafe/agenttool"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/envelope"
)

// I2 and the conversation's scope through a retrysafe upstream
// (key_argument "_meta"): with conversation set, two conversations of one
// user are two scopes, and the same message asked in each is two actions
// to the guard (two references, two fences). But the guard sends the
// upstream nothing of the conversation the upstream keys by, and the
// upstream keys by its own caller — the guard — so the second
// conversation's message meets the first's action there and is replayed:
// the second conversation is answered success, and its message was never
// sent. Each conversation's action must be sent once, or the second must
// not be told success.
func TestGuard_ARetrysafeUpstreamKeepsConversationsApart(t *testing.T) {
	c := &counter{}
	up := retrysafeSender(t, c)
	cfg, err := mcpguard.ParseConfig([]byte(`{
	  "principal": "ana@example.com",
	  "conversation": {"meta": "conversation_id"},
	  "mcpServers": {"sender": {"command": "sender-mcp",
	    "tools": {"send_message": {"class": "keyed", "key_argument": "_meta"}}}}}`))
	if err == nil {
		cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
		var g *mcpguard.Guard
		g, err = mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: serving(up), Logger: discard()})
		if err == nil {
			t.Cleanup(func() { g.Close() })
			cs := connect(t, g)
			msg := map[string]any{"to": "#team", "text": "Lunch at one?"}
			_, first := call(t, cs, "send_message", msg, mcp.Meta{"conversation_id": "chat-1"})
			_, second := call(t, cs, "send_message", msg, mcp.Meta{"conversation_id": "chat-2"})
			t.Logf("chat-1: %s\nchat-2: %s", first, second)
			if first.Status != envelope.Success {
				t.Fatalf("chat-1: %s", first)
			}
			if first.RequestRef == second.RequestRef {
				t.Fatalf("one reference for two conversations: %s", first.RequestRef)
			}
			if second.Status == envelope.Success && c.count() != 2 {
				t.Errorf("chat-2 was told success, but only %d message was sent (%q): its action was answered with chat-1's", c.count(), c.sent)
			}
			return
		}
	}
	// Refused at start: the upstream would key both conversations' calls alike.
	if !strings.Contains(err.Error(), "key_argument") || !strings.Contains(err.Error(), "conversation") {
		t.Errorf("refused without naming the field and the conversation: %v", err)
	}
	t.Logf("refused: %v", err)
}

// I2 for a call the guard answers without reaching the action's record:
// a booking's reply is lost (unknown_outcome: "This may already have
// happened"), and the guard restarts while its server is down. The
// model's retry of the same booking is answered by the guard's
// placeholder, definite_failure unavailable, "Nothing was done" — and the
// model tells the user the booking failed, though the server made it.
// The engine answers a call that never reached the action's record
// (store_unavailable, cancelled) as a definite failure of this call only,
// which says that an earlier call of the same action may have done it and
// not to tell the user it failed; the guard's own refusals must say no
// more than that.
func TestGuard_ARefusalThatNeverReachedTheRecordNeverSaysTheActionFailed(t *testing.T) {
	a := &airline{}
	path := filepath.Join(t.TempDir(), "guard.db")
	r := newRig(t, a, rigOptions{path: path, config: configWith(`{"class": "at_most_once"}`, "")})
	a.lose(1)
	_, first := r.call("book", lunchFlight)
	if first.Status != envelope.UnknownOutcome || a.count() != 1 {
		t.Fatalf("a booking whose reply was lost: %s, %d bookings", first, a.count())
	}
	r.client.Close()
	if err := r.guard.Close(); err != nil {
		t.Fatal(err)
	}
	// The guard starts again; the server is down.
	cfg, err := mcpguard.ParseConfig([]byte(configWith(`{"class": "at_most_once"}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Path = path
	down := func(string, *mcpguard.Server) (mcp.Transport, error) { return nil, errors.New("connection refused") }
	g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: down, Logger: discard(), RetryConnect: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	_, again := call(t, connect(t, g), "book", lunchFlight, nil)
	t.Logf("first: %s\nagain, the server down: %s", first, again)
	if again.Status == envelope.Success {
		t.Fatalf("the retry while the server is down: %s", again)
	}
	if again.Status == envelope.DefiniteFailure && !strings.Contains(again.Note, "do not tell the user it failed") {
		t.Errorf("the retry of a booking the server made is answered definite_failure, note %q: the model tells the user it failed", again.Note)
	}
}

// I2 and the conversation's scope, for a client that numbers its
// conversations: conversation {"meta": "conversation_id"}, and the client
// sends 7 and 8 — JSON numbers. The guard reads only a string there, so
// both calls fall back to the principal's one conversation: the same
// booking asked in conversation 8 meets conversation 7's action and is
// answered success with its result, and conversation 8's booking is never
// made. Two conversations the client tells apart are two scopes.
func TestGuard_ConversationsNumberedByTheClientNeverShareAnAction(t *testing.T) {
	a := &airline{}
	r := newRig(t, a, rigOptions{config: configWith(`{"class": "at_most_once"}`, `"conversation": {"meta": "conversation_id"}`)})
	_, first := call(t, r.client, "book", lunchFlight, mcp.Meta{"conversation_id": 7})
	_, second := call(t, r.client, "book", lunchFlight, mcp.Meta{"conversation_id": 8})
	t.Logf("conversation 7: %s\nconversation 8: %s", first, second)
	for _, env := range []envelope.Envelope{first, second} {
		if env.Status == envelope.DefiniteFailure && a.count() == 2 {
			t.Errorf("a booking was made, and its call answered definite_failure: %s", env)
		}
	}
	if first.Status == envelope.Success && second.Status == envelope.Success && a.count() != 2 {
		t.Errorf("conversation 8 was told success, but %d booking was made: it was answered with conversation 7's", a.count())
	}
}

// I1 across a change of the check's own tool. A reconcilable booking's
// reply is lost while its check cannot answer: unknown. The server then
// renames its check tool's argument (find_booking takes "reference" where
// it took "client_reference") and says so (notifications/tools/list_changed):
// the guard passes a read-only tool's new schema through, and goes on
// calling the check with the arguments its configuration wrote for the old
// one. The server, as many do (pydantic ignores arguments it does not
// know), looks for no reference, finds none, and answers found false: the
// guard reads "not applied", and the model's retry books a second seat. A
// guarded tool whose schema changes is refused, since what makes its keys
// may have changed; a check tool whose schema changes may no longer find
// the action, and its "not applied" proves nothing.
func TestGuard_ACheckWhoseToolChangedNeverLetsASecondAttemptGo(t *testing.T) {
	a := &airline{}
	up := a.server()
	tune := func(_ string, o *agenttool.Options) {
		o.Retry = agenttool.RetryPolicy{MaxAttempts: 1}
		o.ClockSkew = time.Millisecond
	}
	g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
	  "book_noted": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "100ms", "listen_late": "0s",
	    "check": {"tool": "find_booking", "arguments": {"client_reference": "${ref}"},
	      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
	  "find_booking": {"class": "read_only"}}}}}`, mcpguard.Options{Tune: tune})
	cs := connect(t, g)

	a.lose(1)
	a.setFindRefDown(true)
	_, first := call(t, cs, "book_noted", lunchFlight, nil)
	if first.Status != envelope.UnknownOutcome || a.count() != 1 {
		t.Fatalf("a booking whose reply was lost and whose check cannot answer: %s, %d bookings", first, a.count())
	}
	a.setFindRefDown(false)

	// find_booking now takes "reference", and ignores what it does not know.
	mcp.AddTool(up, &mcp.Tool{Name: "find_booking", Description: "Find a booking by its reference.", InputSchema: json.RawMessage(
		`{"type": "object", "properties": {"reference": {"type": "string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest, in map[string]any) (*mcp.CallToolResult, map[string]any, error) {
			ref, _ := in["reference"].(string)
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, b := range a.bookings {
				if ref != "" && b.Reference == ref {
					return nil, map[string]any{"found": true, "booking": b}, nil
				}
			}
			return nil, map[string]any{"found": false}, nil
		})
	for deadline := time.Now().Add(10 * time.Second); ; {
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		taken := false
		for _, tool := range res.Tools {
			b, _ := json.Marshal(tool.InputSchema)
			taken = taken || (tool.Name == "find_booking" && strings.Contains(string(b), `"reference"`) && !strings.Contains(string(b), "client_reference"))
		}
		if taken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guard never took the server's new listing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the first attempt can no longer land, as the tool's rules count it

	_, again := call(t, cs, "book_noted", lunchFlight, nil)
	t.Logf("first: %s\nagain, after the check's tool changed: %s", first, again)
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings for one action, want 1", n)
	}
}

// The same at start: a check whose arguments its tool's schema does not
// take (the server renamed it before the guard started, or the
// configuration misspelt it) stops the guard, naming the field, as a key
// argument the schema lacks does.
func TestGuard_ACheckArgumentItsToolDoesNotTakeStopsTheGuard(t *testing.T) {
	a := &airline{}
	cfg, err := mcpguard.ParseConfig([]byte(`{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
	  "book_noted": {"class": "reconcilable", "ref_argument": "client_reference",
	    "check": {"tool": "find_booking", "arguments": {"reference": "${ref}"},
	      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
	  "find_booking": {"class": "read_only"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
	g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: serving(a.server()), Logger: discard()})
	if err == nil {
		g.Close()
		t.Fatal("a check that gives its tool an argument it does not take: the guard started")
	}
	t.Logf("refused: %v", err)
	if !strings.Contains(err.Error(), "mcpServers.airline.tools.book_noted.check.arguments") || !strings.Contains(err.Error(), `"reference"`) {
		t.Errorf("refused without naming the field and the argument: %v", err)
	}
}
