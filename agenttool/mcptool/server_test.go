package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// A client sees the tool's real input schema, the envelope's schema as
// output schema, and honest annotations.
func TestServerAdvertisesTheTool(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, &mcptool.ServerOptions{
		Class:       agenttool.Keyed,
		Annotations: &mcp.ToolAnnotations{Title: "Book a flight", ReadOnlyHint: true}, // a wrong hint is overruled
	})
	lookup, err := agenttool.New("flight_status", "Say whether a flight is on time.",
		func(context.Context, seat) (string, error) { return "on time", nil },
		agenttool.Options{Class: agenttool.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	if err := mcptool.Register(s.server, lookup, &mcptool.ServerOptions{Class: agenttool.ReadOnly}); err != nil {
		t.Fatal(err)
	}
	cs := connectInMemory(t, s.server, "ana", nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		byName[tl.Name] = tl
	}
	book, status := byName["book_flight"], byName["flight_status"]
	if book == nil || status == nil {
		t.Fatalf("listed tools: %v", res.Tools)
	}
	if !sameJSONValue(t, book.InputSchema, lookup.Schema()) { // same input type
		t.Errorf("input schema %v, want the tool's %s", book.InputSchema, lookup.Schema())
	}
	if !sameJSONValue(t, book.OutputSchema, envelope.Schema) {
		t.Errorf("output schema %v, want the envelope's", book.OutputSchema)
	}
	if !strings.Contains(book.Description, "Book one seat on a flight.") || !strings.Contains(book.Description, "envelope") {
		t.Errorf("description %q", book.Description)
	}
	if a := book.Annotations; a == nil || !a.IdempotentHint || a.ReadOnlyHint || a.Title != "Book a flight" {
		t.Errorf("book_flight annotations %+v, want idempotent, not read-only, titled", a)
	}
	if a := status.Annotations; a == nil || !a.IdempotentHint || !a.ReadOnlyHint {
		t.Errorf("flight_status annotations %+v, want idempotent and read-only", a)
	}
}

func sameJSONValue(t *testing.T, a any, b []byte) bool {
	t.Helper()
	ab, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var x, y any
	if err := json.Unmarshal(ab, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// A tools/call sent again with the same arguments is replayed, also after
// the client reconnected; the envelope says so, with the first result.
func TestResentCallIsReplayed(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	first := callRaw(t, connectInMemory(t, s.server, "ana", nil), anaSeat, nil)
	again := callRaw(t, connectInMemory(t, s.server, "ana", nil), // a new connection, a new MCP session
		`{"passenger":"Ana Lima","date":"2026-12-12","flight":"TP1234"}`, nil)
	if first.Status != envelope.Success || first.Replayed || again.Status != envelope.Success || !again.Replayed {
		t.Fatalf("envelopes %s then %s; want a success, then the same replayed", first, again)
	}
	if string(first.Result) != string(again.Result) || first.RequestRef != again.RequestRef {
		t.Errorf("the replay differs: %s vs %s", first, again)
	}
	if n := s.desk.count(); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
}

// The handler run twice at once for one request (a multi-round-trip
// re-invocation, a duplicated delivery) runs the tool once; both answers
// carry the same outcome.
func TestHandlerRunTwiceRunsToolOnce(t *testing.T) {
	d := &desk{hold: make(chan struct{}), entered: make(chan struct{})}
	s := newServed(t, d, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	var mu sync.Mutex
	var results []*mcp.CallToolResult
	s.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/call" {
				return next(ctx, method, req)
			}
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					res, err := next(ctx, method, req)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					results = append(results, res.(*mcp.CallToolResult))
					mu.Unlock()
				})
			}
			<-d.entered // one run holds the key; the other meets it
			close(d.hold)
			wg.Wait()
			return results[0], nil
		}
	})
	callRaw(t, connectInMemory(t, s.server, "ana", nil), anaSeat, nil)
	if n, runs := d.count(), d.runs.Load(); n != 1 || runs != 1 {
		t.Fatalf("%d bookings in %d runs, want 1 in 1", n, runs)
	}
	var envs []envelope.Envelope
	for _, r := range results {
		env, err := envelope.Parse([]byte(r.Content[0].(*mcp.TextContent).Text))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	if len(envs) != 2 || envs[0].Status != envelope.Success || envs[1].Status != envelope.Success ||
		string(envs[0].Result) != string(envs[1].Result) || envs[0].Replayed == envs[1].Replayed {
		t.Errorf("the two runs answered %v; want one success and the same replayed", envs)
	}
}

// A key in the arguments is refused before anything runs, whether the
// model or the client put it there.
func TestModelSuppliedKeyIsRefused(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	cs := connectInMemory(t, s.server, "ana", nil)
	for _, args := range []string{
		`{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima","idempotency_key":"k-1"}`,
		`{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima","Idempotency-Key":"k-1"}`,
	} {
		env := callRaw(t, cs, args, nil)
		if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeModelSuppliedKey || env.Attempts != 0 {
			t.Errorf("%s answered %s; want model_supplied_key", args, env)
		}
	}
	if runs := s.desk.runs.Load(); runs != 0 {
		t.Errorf("the tool ran %d times", runs)
	}
}

// Without a principal nothing runs: not under the tool's DefaultScope, nor
// under a scope on the session's context, unless the application asks.
func TestNoPrincipalIsMissingScope(t *testing.T) {
	def := &agenttool.Scope{Principal: "service", Session: "batch"}
	for _, tc := range []struct {
		name string
		opts *mcptool.ServerOptions
		want envelope.Status
	}{
		{"default options", nil, envelope.DefiniteFailure},
		{"UseDefaultScope", &mcptool.ServerOptions{UseDefaultScope: true}, envelope.Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServed(t, &desk{}, agenttool.Options{DefaultScope: def}, tc.opts)
			// In memory there is no bearer token; the session's context
			// carries a scope the handler must not use.
			st, ct := mcp.NewInMemoryTransports()
			ctx := agenttool.WithScope(context.Background(), "someone", "somewhere")
			ss, err := s.server.Connect(ctx, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ss.Close()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(), ct, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			env := callRaw(t, cs, anaSeat, nil)
			if env.Status != tc.want {
				t.Fatalf("answered %s, want %s", env, tc.want)
			}
			if tc.want == envelope.DefiniteFailure {
				if env.Error.Code != envelope.CodeMissingScope || env.Next != envelope.DoNotRetry || s.desk.runs.Load() != 0 {
					t.Errorf("answered %s after %d runs; want missing_scope and nothing run", env, s.desk.runs.Load())
				}
				return
			}
			if b := s.desk.all(); len(b) != 1 || b[0].Principal != "service" {
				t.Errorf("bookings %v; want one, by the default scope's principal", b)
			}
		})
	}
}

// _meta is not trusted: a forged request reference, principal or session
// there changes nothing.
func TestForgedMetaChangesNothing(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	ana, bob := connectInMemory(t, s.server, "ana", nil), connectInMemory(t, s.server, "bob", nil)
	first := callRaw(t, ana, anaSeat, nil)
	forged := func(ref string) mcp.Meta {
		return mcp.Meta{mcptool.MetaRequestRef: ref, "request_ref": ref, "principal": "ana", "session": "mcp", "idempotency_key": ref}
	}
	// Bob presents Ana's reference: he gets an action of his own.
	bobs := callRaw(t, bob, anaSeat, forged(first.RequestRef))
	// Ana presents a made-up one: her call is the same action as before.
	anas := callRaw(t, ana, anaSeat, forged("book_flight/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"))
	if bobs.Status != envelope.Success || bobs.Replayed || bobs.RequestRef == first.RequestRef {
		t.Errorf("Bob's call with Ana's reference in _meta answered %s; want his own new booking", bobs)
	}
	if anas.Status != envelope.Success || !anas.Replayed || anas.RequestRef != first.RequestRef || string(anas.Result) != string(first.Result) {
		t.Errorf("Ana's repeat with a forged reference answered %s; want her first booking replayed", anas)
	}
	if got := s.desk.all(); len(got) != 2 || got[0].Principal != "ana" || got[1].Principal != "bob" {
		t.Errorf("bookings %v; want Ana's, then Bob's", got)
	}
}

// Registration refuses what MCP cannot serve instead of panicking.
func TestRegisterRefuses(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "x", Version: "1"}, nil)
	tool, err := agenttool.New("book_flight", "Book.", (&desk{}).book, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	if err != nil {
		t.Fatal(err)
	}
	if err := mcptool.Register(server, tool, &mcptool.ServerOptions{Class: agenttool.Class(42)}); err == nil {
		t.Error("an unknown class was accepted")
	}
}

// A principal without a session is refused, never run under the tool's
// default scope; a failing Principal function is refused without telling
// the caller why.
func TestIncompleteScopeIsRefused(t *testing.T) {
	def := &agenttool.Scope{Principal: "service", Session: "batch"}
	for _, tc := range []struct {
		name string
		opts mcptool.ServerOptions
	}{
		{"no session", mcptool.ServerOptions{Principal: connectionUser, UseDefaultScope: true,
			Session: func(context.Context, mcptool.Caller) (string, error) { return "", nil }}},
		{"principal error", mcptool.ServerOptions{UseDefaultScope: true,
			Principal: func(context.Context, mcptool.Caller) (string, error) {
				return "", errors.New("directory at 10.0.0.3 unreachable")
			}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServed(t, &desk{}, agenttool.Options{DefaultScope: def}, &tc.opts)
			env := callRaw(t, connectInMemory(t, s.server, "ana", nil), anaSeat, nil)
			if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeMissingScope || s.desk.runs.Load() != 0 {
				t.Errorf("answered %s after %d runs; want missing_scope, nothing run", env, s.desk.runs.Load())
			}
			if strings.Contains(env.Error.Message, "10.0.0.3") {
				t.Errorf("the refusal tells the caller the server's error: %s", env.Error.Message)
			}
		})
	}
}

// An action id on the session's context does not make every call one
// action: the arguments tell actions apart.
func TestSessionActionIDIsIgnored(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	st, ct := mcp.NewInMemoryTransports()
	ctx := agenttool.WithActionID(context.WithValue(context.Background(), userKey{}, "ana"), "step-1")
	ss, err := s.server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	a := callRaw(t, cs, anaSeat, nil)
	b := callRaw(t, cs, `{"flight":"TP1234","date":"2026-12-12","passenger":"Rui Costa"}`, nil)
	if a.Status != envelope.Success || b.Status != envelope.Success || a.RequestRef == b.RequestRef || s.desk.count() != 2 {
		t.Errorf("two passengers answered %s and %s; want two bookings", a, b)
	}
}
