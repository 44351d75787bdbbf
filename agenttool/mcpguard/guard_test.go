package mcpguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

var lunchFlight = map[string]any{"flight": "TP1234", "passenger": "Ana Lima"}

// The client sees the server's tools with their own schemas, less the
// argument the guard fills; a success answers with the server's own
// result, and the envelope in _meta.
func TestGuard_TheClientSeesTheServersToolsAndResults(t *testing.T) {
	a := &airline{}
	r := newRig(t, a, rigOptions{})
	var names []string
	for tool, err := range r.client.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		if tool.Name == "book" {
			schema, _ := json.Marshal(tool.InputSchema)
			if strings.Contains(string(schema), "idempotency_key") {
				t.Errorf("the client sees the key argument the guard fills: %s", schema)
			}
			if !strings.Contains(string(schema), "passenger") {
				t.Errorf("the client does not see the server's schema: %s", schema)
			}
		}
	}
	if got := strings.Join(names, ","); got != "book,book_noted,find_booking,list_flights" {
		t.Errorf("the client sees %s", got)
	}
	res, env := r.call("book", lunchFlight)
	if res.IsError || env.Status != envelope.Success {
		t.Fatalf("booking through the guard: %+v %s", res, env)
	}
	if got := resultText(res); !strings.Contains(got, `"id":"BK-1"`) || !strings.Contains(got, `"passenger":"Ana Lima"`) {
		t.Errorf("the client's result is not the server's: %s", got)
	}
	if env.RequestRef == "" || env.Tool != "book" {
		t.Errorf("the envelope in _meta: %s", env)
	}
	if rec, err := r.guard.Store().Get(context.Background(), env.RequestRef); err != nil || rec.Label != "desktop" {
		t.Errorf("the action's record: label %q, %v; want it labelled with the client's name", rec.Label, err)
	}
	res, _ = r.call("list_flights", map[string]any{"from": "LIS"})
	if got := resultText(res); !strings.Contains(got, "TP1235") {
		t.Errorf("a read-only tool's result: %s", got)
	}
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
}

// A keyed tool's reply lost after the server booked: the call is
// unknown_outcome, never a second booking; the client's retry goes with
// the same key, and the server answers the first booking.
func TestGuard_KeyedLostReplyBooksOnce(t *testing.T) {
	a := &airline{}
	r := newRig(t, a, rigOptions{tune: func(string, *agenttool.Options) {}})
	a.lose(2) // both attempts of the first call lose their reply
	res, env := r.call("book", lunchFlight)
	t.Logf("first call: %s", env)
	if env.Status != envelope.UnknownOutcome || !res.IsError {
		t.Fatalf("a booking whose reply was lost: %s; want unknown_outcome", env)
	}
	_, again := r.call("book", lunchFlight) // the model retries, as told
	t.Logf("retry: %s", again)
	if again.Status != envelope.Success {
		t.Errorf("the retry of a keyed booking: %s; want success", again)
	}
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings for one logical action, want 1", n)
	}
}

// A client (or a model) that sends the key argument itself is refused:
// only the guard makes keys. Nothing is sent, nothing recorded as done.
func TestGuard_AModelKeyIsRefused(t *testing.T) {
	a := &airline{}
	r := newRig(t, a, rigOptions{})
	res, env := r.call("book", map[string]any{"flight": "TP1234", "passenger": "Ana Lima", "idempotency_key": "mine"})
	t.Logf("%s", env)
	if !res.IsError || env.Status != envelope.DefiniteFailure {
		t.Errorf("a call carrying idempotency_key: %s; want definite_failure", env)
	}
	if n := a.count(); n != 0 {
		t.Errorf("%d bookings", n)
	}
}

// A reconcilable tool's reply lost: the guard asks the server with the
// check tool, by the reference it sent as client_reference, and answers
// what the server says — done, once.
func TestGuard_ReconcilableLostReplyIsCheckedNotResent(t *testing.T) {
	a := &airline{}
	r := newRig(t, a, rigOptions{})
	a.lose(1)
	res, env := r.call("book_noted", lunchFlight)
	t.Logf("%s", env)
	if env.Status != envelope.Success || !env.Reconciled || res.IsError {
		t.Errorf("a booking whose reply was lost, checked: %s; want success, reconciled", env)
	}
	_, again := r.call("book_noted", lunchFlight)
	if again.Status != envelope.Success {
		t.Errorf("the retry: %s", again)
	}
	_, reworded := r.call("book_noted", map[string]any{"flight": "TP1234", "passenger": "Ana  Lima"})
	t.Logf("reworded: %s", reworded)
	if n := a.count(); n > 2 {
		t.Errorf("%d bookings", n)
	}
	if a.count() == 2 && reworded.Status != envelope.Success {
		t.Errorf("a second booking was made, but the envelope says %s", reworded.Status)
	}
}

// An at-most-once tool's reply lost: unknown_outcome, and neither the
// retry nor a reworded copy sends it again.
func TestGuard_AtMostOnceLostReplyIsNeverResent(t *testing.T) {
	a := &airline{}
	cfg := configWith(`{"class": "at_most_once"}`, "")
	r := newRig(t, a, rigOptions{config: cfg})
	a.lose(1)
	_, env := r.call("book", lunchFlight)
	if env.Status != envelope.UnknownOutcome {
		t.Fatalf("%s; want unknown_outcome", env)
	}
	_, again := r.call("book", lunchFlight)
	_, reworded := r.call("book", map[string]any{"flight": "TP1234", "passenger": "Ana Lima (window)"})
	t.Logf("retry: %s\nreworded: %s", again, reworded)
	if again.Status == envelope.Success || reworded.Status == envelope.Success {
		t.Errorf("a retry or a reworded copy after an unknown outcome answered success")
	}
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings for one logical action, want 1", n)
	}
}

// A result with isError from a server the configuration says reports
// errors only for calls that changed nothing is a definite failure; by
// default it is unknown (MCP reports every failure so).
func TestGuard_ToolErrorsAreUnknownUnlessTheConfigurationSays(t *testing.T) {
	for _, tc := range []struct {
		errors string
		want   envelope.Status
	}{{"", envelope.UnknownOutcome}, {`, "errors": "definite"`, envelope.DefiniteFailure}} {
		a := &airline{refuse: true}
		cfg := configWith(`{"class": "at_most_once"`+tc.errors+`}`, "")
		r := newRig(t, a, rigOptions{config: cfg})
		_, env := r.call("book", lunchFlight)
		if env.Status != tc.want {
			t.Errorf("errors %q: %s; want %s", tc.errors, env, tc.want)
		}
	}
}

// The guard restarts between a call whose reply was lost and its retry:
// the bbolt store remembers, and the retry answers the first booking.
func TestGuard_ARestartBetweenTheCallAndItsRetryBooksOnce(t *testing.T) {
	a := &airline{}
	path := filepath.Join(t.TempDir(), "guard.db")
	r := newRig(t, a, rigOptions{path: path})
	a.lose(2)
	_, env := r.call("book", lunchFlight)
	if env.Status != envelope.UnknownOutcome {
		t.Fatalf("%s", env)
	}
	r.client.Close()
	if err := r.guard.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := newRig(t, a, rigOptions{path: path})
	_, again := r2.call("book", lunchFlight)
	t.Logf("after the restart: %s", again)
	if again.Status != envelope.Success || again.RequestRef != env.RequestRef {
		t.Errorf("the retry after a restart: %s; want success under %s", again, env.RequestRef)
	}
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
}

// The operator changes key_form while bookings are unknown, and restarts
// the guard. The server would find neither under the new form: a keyed
// resend would book again under a key it never saw, and a check would
// read not found and let the booking be made again. So the guard neither
// resends nor checks them: each retry answers unknown, ask_human, for a
// person, until a guard that sends the reference as they were sent takes
// them up again.
func TestGuard_AChangedKeyFormNeverBooksAnUnknownBookingTwice(t *testing.T) {
	a := &airline{}
	path := filepath.Join(t.TempDir(), "guard.db")
	noted := map[string]any{"flight": "TP1235", "passenger": "Ana Lima"}
	restart := func(r *rig, config string) *rig {
		r.client.Close()
		if err := r.guard.Close(); err != nil {
			t.Fatal(err)
		}
		return newRig(t, a, rigOptions{path: path, config: config})
	}
	r := newRig(t, a, rigOptions{path: path})
	a.lose(2)
	_, keyed := r.call("book", lunchFlight)
	a.lose(1)
	a.setFindRefDown(true)
	_, checked := r.call("book_noted", noted)
	if keyed.Status != envelope.UnknownOutcome || checked.Status != envelope.UnknownOutcome || a.count() != 2 {
		t.Fatalf("the bookings before the change: %s, %s, %d bookings; want both unknown, both made", keyed, checked, a.count())
	}
	a.setFindRefDown(false)

	r = restart(r, strings.NewReplacer(`"key_argument": "idempotency_key"`, `"key_argument": "idempotency_key", "key_form": "uuid"`,
		`"ref_argument": "client_reference"`, `"ref_argument": "client_reference", "key_form": "uuid"`).Replace(guardConfig))
	for _, c := range []struct {
		tool  string
		args  any
		first envelope.Envelope
	}{{"book", lunchFlight, keyed}, {"book_noted", noted, checked}} {
		_, again := r.call(c.tool, c.args)
		t.Logf("%s after the change: %s", c.tool, again)
		if again.Status != envelope.UnknownOutcome || again.Next != envelope.AskHuman || again.RequestRef != c.first.RequestRef ||
			!strings.Contains(again.Error.Message, "handed the destination the reference another way") {
			t.Errorf("%s retried after key_form changed: %s; want unknown, ask_human, saying why", c.tool, again)
		}
	}
	if n := a.count(); n != 2 {
		t.Fatalf("%d bookings after the retries under the new key_form; want 2", n)
	}

	r = restart(r, guardConfig)
	_, keyedAgain := r.call("book", lunchFlight)
	_, checkedAgain := r.call("book_noted", noted)
	if keyedAgain.Status != envelope.Success || checkedAgain.Status != envelope.Success || !checkedAgain.Reconciled || a.count() != 2 {
		t.Errorf("the retries under the key_form they were sent with: %s, %s, %d bookings; want both settled, 2 bookings", keyedAgain, checkedAgain, a.count())
	}
}

// Tools the configuration does not name are refused by default; the
// default read_only passes them through, and a default class guards them.
func TestGuard_ToolsTheConfigurationDoesNotName(t *testing.T) {
	base := `{"principal": "ana", "mcpServers": {"airline": {"command": "x", "tools": {"book": {"class": "at_most_once"}}}}`
	for _, tc := range []struct{ def, want string }{
		{``, "book"},
		{`, "default": "read_only"`, "book,book_noted,find_booking,find_by_passenger,list_flights"},
		{`, "default": {"class": "at_most_once"}`, "book,book_noted,find_booking,find_by_passenger,list_flights"},
	} {
		r := newRig(t, &airline{}, rigOptions{config: base + tc.def + `}`})
		var names []string
		for tool, err := range r.client.Tools(context.Background(), nil) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, tool.Name)
		}
		if got := strings.Join(names, ","); got != tc.want {
			t.Errorf("default %q: the client sees %s, want %s", tc.def, got, tc.want)
		}
	}
}

// A call without a principal (no token, none configured) runs nothing.
func TestGuard_NoPrincipalRunsNothing(t *testing.T) {
	a := &airline{}
	cfg := strings.Replace(guardConfig, `"principal": "ana@example.com",`, ``, 1)
	r := newRig(t, a, rigOptions{config: cfg})
	_, env := r.call("book", lunchFlight)
	if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeMissingScope {
		t.Errorf("%s; want missing_scope", env)
	}
	if a.count() != 0 {
		t.Error("a booking was made without a principal")
	}
}

// A conversation named in _meta scopes the fence: another conversation's
// write is not held by this one's unknown booking.
func TestGuard_AConversationInMetaScopesTheFence(t *testing.T) {
	a := &airline{}
	cfg := configWith(`{"class": "at_most_once"}`, `"conversation": {"meta": "conversation_id"}`)
	r := newRig(t, a, rigOptions{config: cfg})
	a.lose(1)
	_, env := call(t, r.client, "book", lunchFlight, mcp.Meta{"conversation_id": "c1"})
	if env.Status != envelope.UnknownOutcome {
		t.Fatalf("%s", env)
	}
	_, same := call(t, r.client, "book", map[string]any{"flight": "TP9", "passenger": "Bob"}, mcp.Meta{"conversation_id": "c1"})
	_, other := call(t, r.client, "book", map[string]any{"flight": "TP9", "passenger": "Bob"}, mcp.Meta{"conversation_id": "c2"})
	t.Logf("same conversation: %s\nother: %s", same, other)
	if same.Error == nil || same.Error.Code != envelope.CodeEarlierUnknown {
		t.Errorf("a new write in the conversation of an unknown one: %s; want earlier_action_unknown", same)
	}
	if other.Status != envelope.Success {
		t.Errorf("a write of another conversation: %s; want success", other)
	}
}

// A server that is down when the guard starts: the tools the
// configuration names answer unavailable (nothing sent); once it is up,
// they work.
func TestGuard_AServerDownAtStartAnswersUnavailableUntilUp(t *testing.T) {
	a := &airline{}
	cfg, err := mcpguard.ParseConfig([]byte(guardConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
	up := a.server()
	var down = true
	transport := func(string, *mcpguard.Server) (mcp.Transport, error) {
		if down {
			return nil, errors.New("connection refused")
		}
		ct, st := mcp.NewInMemoryTransports()
		if _, err := up.Connect(context.Background(), st, nil); err != nil {
			return nil, err
		}
		return ct, nil
	}
	g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: transport, Logger: discard(), RetryConnect: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cs := connect(t, g)
	res, env := call(t, cs, "book", lunchFlight, nil)
	if !res.IsError || env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeUnavailable {
		t.Errorf("a call while the server is down: %s; want definite_failure unavailable", env)
	}
	down = false
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, env = call(t, cs, "book", lunchFlight, nil)
		if env.Status == envelope.Success || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if env.Status != envelope.Success || a.count() != 1 {
		t.Errorf("once the server is up: %s, %d bookings", env, a.count())
	}
}

// What a client puts in _meta reaches the server (a traceparent), and a
// server's progress notifications reach the client that asked, under its
// own token, whatever token another client uses.
func TestGuard_MetaAndProgressPassThrough(t *testing.T) {
	a := &airline{}
	r := newRig(t, a, rigOptions{})
	var mu sync.Mutex
	var got []any
	ct, st := mcp.NewInMemoryTransports()
	if _, err := r.guard.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			got = append(got, req.Params.ProgressToken)
			mu.Unlock()
		},
	}).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	const trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	_, env := call(t, cs, "book", lunchFlight, mcp.Meta{"traceparent": trace, "progressToken": "mine"})
	if env.Status != envelope.Success {
		t.Fatalf("%s", env)
	}
	if len(a.traceparents) != 1 || a.traceparents[0] != trace {
		t.Errorf("the server saw traceparents %q, want the client's", a.traceparents)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != "mine" || got[1] != "mine" {
		t.Errorf("the client got progress under tokens %v; want two, under its own token", got)
	}
}

// Over HTTP a configured header names the conversation.
func TestConfig_AConversationIsInMetaOrAHeader(t *testing.T) {
	if _, err := mcpguard.ParseConfig([]byte(`{"conversation": {"header": "X-Conversation", "meta": "c"}, "mcpServers": {"a": {"command": "x"}}}`)); err == nil ||
		!strings.Contains(err.Error(), "name one of meta or header") {
		t.Errorf("two places for the conversation: %v", err)
	}
	if _, err := mcpguard.ParseConfig([]byte(`{"conversation": {"header": "X-Conversation"}, "mcpServers": {"a": {"command": "x"}}}`)); err != nil {
		t.Error(err)
	}
}

type headerRT struct{ h, v string }

func (rt headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(rt.h, rt.v)
	return http.DefaultTransport.RoundTrip(r)
}

// Over HTTP, a conversation named in a header scopes the fence as one in
// _meta does.
func TestGuard_AConversationInAHeaderScopesTheFence(t *testing.T) {
	a := &airline{}
	cfg := configWith(`{"class": "at_most_once"}`, `"conversation": {"header": "X-Conversation"}`)
	r := newRig(t, a, rigOptions{config: cfg})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return r.guard.Server() }, nil))
	t.Cleanup(srv.Close) // after the clients close (cleanups run last first): their streams hold connections open
	client := func(conversation string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: headerRT{"X-Conversation", conversation}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	c1, c2 := client("c1"), client("c2")
	a.lose(1)
	if _, env := call(t, c1, "book", lunchFlight, nil); env.Status != envelope.UnknownOutcome {
		t.Fatalf("%s", env)
	}
	_, same := call(t, c1, "book", map[string]any{"flight": "TP9", "passenger": "Bob"}, nil)
	_, other := call(t, c2, "book", map[string]any{"flight": "TP9", "passenger": "Bob"}, nil)
	if same.Error == nil || same.Error.Code != envelope.CodeEarlierUnknown {
		t.Errorf("a new write in the conversation of an unknown one: %s; want earlier_action_unknown", same)
	}
	if other.Status != envelope.Success {
		t.Errorf("a write of another conversation: %s; want success", other)
	}
}

// Two tools the client sees under two names are two tools to the guard:
// one's record never answers a call of the other. Here the names differ
// only where the guard's toolName sanitises them — a "." that a prefix
// brings (valid in an MCP tool name) against a "_", and two long names
// that differ after their 64th byte — so that, unless the guard keeps
// them apart, the second tool's call with the same arguments meets the
// first one's key and is answered the first one's success, though its own
// server never sent anything.
func TestGuard_TwoToolsNeverShareAnAction(t *testing.T) {
	long := "send_a_message_to_the_recipient_through_the_corporate_messaging_gateway_"
	for _, tc := range []struct {
		name   string
		config string
		a, b   string // the names the client sees
	}{
		{"a prefix with a dot", `{"principal": "ana", "mcpServers": {
			"mail": {"command": "mail-mcp", "prefix": "team.", "tools": {"send": {"class": "at_most_once"}}},
			"chat": {"command": "chat-mcp", "prefix": "team_", "tools": {"send": {"class": "at_most_once"}}}}}`,
			"team.send", "team_send"},
		{"names longer than 64 bytes", `{"principal": "ana", "mcpServers": {
			"mail": {"command": "mail-mcp", "tools": {"` + long + `by_email": {"class": "at_most_once"}, "` + long + `by_sms": {"class": "at_most_once"}}}}}`,
			long + "by_email", long + "by_sms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := mcpguard.ParseConfig([]byte(tc.config))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
			servers := map[string]*counter{}
			transport := func(name string, s *mcpguard.Server) (mcp.Transport, error) {
				c := &counter{}
				servers[name] = c
				var tools []string
				for tool := range s.Tools {
					tools = append(tools, tool)
				}
				ct, st := mcp.NewInMemoryTransports()
				if _, err := c.server(tools...).Connect(context.Background(), st, nil); err != nil {
					return nil, err
				}
				return ct, nil
			}
			g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: transport, Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			cs := connect(t, g)
			msg := map[string]any{"to": "ops", "text": "The deploy is done."}
			resA, envA := call(t, cs, tc.a, msg, nil)
			resB, envB := call(t, cs, tc.b, msg, nil)
			t.Logf("%s: %s %s\n%s: %s %s", tc.a, envA, resultText(resA), tc.b, envB, resultText(resB))
			sent := 0
			for _, c := range servers {
				sent += c.count()
			}
			if envA.Status != envelope.Success {
				t.Fatalf("%s: %s", tc.a, envA)
			}
			if envB.Status == envelope.Success && sent != 2 {
				t.Errorf("%s answered success, but its server sent nothing: %d messages in all, want 2 (its answer: %s)", tc.b, sent, resultText(resB))
			}
			if envB.RequestRef == envA.RequestRef {
				t.Errorf("two tools share the request reference %s", envA.RequestRef)
			}
		})
	}
}

// retrysafeSender is an MCP server that is itself a retrysafe server
// (mcptool.Register): send_message keys repeats on its own, by its own
// caller — and behind a guard its one caller is the guard, whatever user
// the guard acts for (Principal: the guard's service account, as its
// token or its stdio launch says).
func retrysafeSender(t *testing.T, c *counter) *mcp.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	tool, err := agenttool.New("send_message", "Send a message.", func(_ context.Context, in sendIn) (map[string]string, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sent = append(c.sent, in.To+": "+in.Text)
		return map[string]string{"id": fmt.Sprintf("MSG-%d", len(c.sent))}, nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce, IdentifyingFields: []string{"to", "text"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := mcptool.Register(s, tool, &mcptool.ServerOptions{Class: agenttool.AtMostOnce,
		Principal: func(context.Context, mcptool.Caller) (string, error) { return "guard-service", nil }}); err != nil {
		t.Fatal(err)
	}
	return s
}

// I6 and I2 through a retrysafe upstream (key_argument "_meta"): two
// users of one HTTP guard, each with a token of its own, send the same
// message. The guard keeps them apart (two principals, two actions), but
// it sends the upstream nothing of who acts, and the upstream keys by its
// own caller — the guard — so Bob's message meets Ana's action there and
// is replayed: Bob is answered success with Ana's message id, and his
// message was never sent. Each user's action must be sent once, or Bob
// must not be told success.
func TestGuard_ARetrysafeUpstreamKeepsPrincipalsApart(t *testing.T) {
	c := &counter{}
	up := retrysafeSender(t, c)
	cfg, err := mcpguard.ParseConfig([]byte(`{
	  "tokens": {"ana@example.com": "ana-token", "bob@example.com": "bob-token"},
	  "mcpServers": {"sender": {"url": "http://sender.internal/mcp",
	    "tools": {"send_message": {"class": "keyed", "key_argument": "_meta"}}}}}`))
	if err != nil {
		// Refused at start: the upstream would key both users' calls alike.
		if !strings.Contains(err.Error(), "mcpServers.sender.tools.send_message.key_argument") {
			t.Errorf("refused without naming the field: %v", err)
		}
		t.Logf("refused: %v", err)
		return
	}
	front := tokenFront(t, cfg, up)
	as := func(token string) *mcp.ClientSession {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: front, HTTPClient: &http.Client{Transport: bearerTransport(token)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	msg := map[string]any{"to": "#team", "text": "Lunch at one?"}
	resAna, ana := call(t, as("ana-token"), "send_message", msg, nil)
	resBob, bob := call(t, as("bob-token"), "send_message", msg, nil)
	t.Logf("ana: %s %s\nbob: %s %s", ana, resultText(resAna), bob, resultText(resBob))
	if ana.Status != envelope.Success {
		t.Fatalf("ana: %s", ana)
	}
	if ana.RequestRef == bob.RequestRef {
		t.Fatalf("one reference for two principals: %s", ana.RequestRef)
	}
	if bob.Status == envelope.Success && c.count() != 2 {
		t.Errorf("bob was told success, but only %d message was sent (%q): his action was answered with ana's", c.count(), c.sent)
	}
}

// tokenFront starts a guard of cfg over up behind a streamable HTTP
// front that maps cfg's bearer tokens to principals, and returns the
// front's URL. It closes after the clients a test connects later
// (cleanups run last first).
func tokenFront(t *testing.T, cfg *mcpguard.Config, up *mcp.Server) string {
	t.Helper()
	cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
	g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: serving(up), Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	verify, err := cfg.Verifier()
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(auth.RequireBearerToken(verify, nil)(
		mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.Server() }, nil)))
	t.Cleanup(front.Close)
	return front.URL
}

// bearerTransport sends a bearer token with every request.
type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// slowAirline is a plain MCP server whose book_noted takes a while to
// commit, and commits whether or not its caller is still waiting (the
// booking system's commit does not stop when the MCP request is
// cancelled, as most do not); find_booking finds a booking by its client
// reference once it is committed.
func slowAirline(a *airline, commit time.Duration) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "book_noted", Description: "Book one seat, keeping a client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in bookIn) (*mcp.CallToolResult, booking, error) {
			time.Sleep(commit) // the commit runs to its end
			return a.book(in)
		})
	type findIn struct {
		Reference string `json:"client_reference"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "find_booking", Description: "Find a booking by its client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, map[string]any, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, b := range a.bookings {
				if b.Reference == in.Reference {
					return nil, map[string]any{"found": true, "booking": b}, nil
				}
			}
			return nil, map[string]any{"found": false}, nil
		})
	return s
}

// I1 for a reconcilable tool, configured as docs/guard.md shows it (not
// applied: /found equals false). The client gives up on a booking after
// 300ms (it cancels; the guard cancels its call upstream), while the
// server's commit, which takes 2s, goes on. The client asks again 1.3s
// later, as a model does after an unknown outcome: the guard checks, the
// server has not committed yet and answers found false, and the guard
// books a second time. Both commits land: two bookings for one action. A
// check's "not found" while the first request may still be running at the
// server proves nothing; the guard must not send again until that request
// can no longer land.
func TestGuard_ReconcilableCancelledCallIsNotSentAgainWhileTheFirstMayLand(t *testing.T) {
	a := &airline{}
	up := slowAirline(a, 2*time.Second)
	g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
	  "book_noted": {"class": "reconcilable", "ref_argument": "client_reference",
	    "check": {"tool": "find_booking", "arguments": {"client_reference": "${ref}"},
	      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
	  "find_booking": {"class": "read_only"}}}}}`, mcpguard.Options{})
	cs := connect(t, g)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "book_noted", Arguments: lunchFlight})
	cancel()
	t.Logf("the first call, given up after 300ms: %v", err)
	time.Sleep(1300 * time.Millisecond)
	_, again := call(t, cs, "book_noted", lunchFlight, nil)
	t.Logf("asked again: %s", again)
	time.Sleep(2500 * time.Millisecond) // every commit started has landed
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings for one action, want 1 (the retry answered %s)", n, again.Status)
	}
}

// brokenListing makes a's server list the tool named broken with an input
// schema that is not an object schema ({"type": "string"}) whenever
// *bad is set: a broken or hostile server, which the SDK's own AddTool
// would not let build such a tool, but whose listing says what it says.
func brokenListing(up *mcp.Server, broken string, bad *atomic.Bool) {
	up.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if lr, ok := res.(*mcp.ListToolsResult); ok && bad.Load() {
				for i, tool := range lr.Tools {
					if tool.Name == broken {
						changed := *tool
						changed.InputSchema = map[string]any{"type": "string"}
						lr.Tools[i] = &changed
					}
				}
			}
			return res, err
		}
	})
}

// A server whose listing is broken never takes the guard down: a tool
// whose input schema is not an object schema is a configuration error
// at start (New returns it), and later — the server changes a guarded
// tool's schema to one and says notifications/tools/list_changed — the
// tool answers schema_changed while the guard and its other tools go on.
// The guard puts the broken schema on its front as it is, and the SDK's
// AddTool panics on it: at start New panics; later the panic is in the
// goroutine that re-lists, and the whole guard process dies, with every
// call in flight through it. The later case runs in a child process
// (this test binary), since a panic on another goroutine ends the process.
func TestGuard_ABrokenListingNeverTakesTheGuardDown(t *testing.T) {
	if os.Getenv("MCPGUARD_TEST_BROKEN_LISTING") == "later" {
		brokenListingLater(t)
		return
	}
	t.Run("at start", func(t *testing.T) {
		a := &airline{}
		cfg, err := mcpguard.ParseConfig([]byte(guardConfig))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
		up := a.server()
		var bad atomic.Bool
		bad.Store(true)
		brokenListing(up, "list_flights", &bad)
		transport := serving(up)
		var g *mcpguard.Guard
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("New panicked on a server that lists a tool whose schema is not an object schema: %v", p)
				}
			}()
			g, err = mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: transport, Logger: discard()})
		}()
		if g != nil {
			g.Close()
		}
		t.Logf("New: %v", err)
		if err == nil && g != nil {
			t.Error("New took a tool whose input schema is not an object schema")
		}
	})
	t.Run("after list_changed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestGuard_ABrokenListingNeverTakesTheGuardDown$", "-test.v")
		cmd.Env = append(os.Environ(), "MCPGUARD_TEST_BROKEN_LISTING=later")
		out, err := cmd.CombinedOutput()
		if err != nil {
			lines := strings.Split(string(out), "\n")
			t.Errorf("the guard's process ended: %v\n%s", err, strings.Join(lines[:min(len(lines), 12)], "\n"))
		}
	})
}

// brokenListingLater is the child of TestGuard_ABrokenListingNeverTakesTheGuardDown.
func brokenListingLater(t *testing.T) {
	a := &airline{}
	r := newRig(t, a, rigOptions{})
	var bad atomic.Bool
	brokenListing(r.up, "book", &bad)
	bad.Store(true)
	// Any change of the server's tools makes it say list_changed.
	r.up.AddTool(&mcp.Tool{Name: "ping", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, env := r.call("book", lunchFlight)
		if env.Error != nil && env.Error.Code == "schema_changed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("book after its schema changed: %s; want schema_changed", env)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res, _ := r.call("list_flights", map[string]any{"from": "LIS"})
	if !strings.Contains(resultText(res), "TP1234") {
		t.Errorf("another tool after the change: %s", resultText(res))
	}
}

// I3 and I9 with the conversation in an argument ("conversation":
// {"argument": ...}): the arguments are what the model writes, so a model
// told that its booking's outcome is unknown, and not to book again, can
// book again by writing another conversation id — a new scope, a new key,
// no fence — and the at-most-once booking is sent twice. The scope of an
// action must not be the model's to choose: a conversation taken from the
// arguments may narrow nothing that keeps an unknown action from being
// sent again.
func TestGuard_AConversationInTheArgumentsIsNotTheModelsToChoose(t *testing.T) {
	cfg := configWith("", `"conversation": {"argument": "conversation_id"}`)
	_, err := mcpguard.ParseConfig([]byte(cfg))
	t.Logf("%v", err)
	if err == nil || !strings.Contains(err.Error(), "model") || !strings.Contains(err.Error(), "meta or header") {
		t.Errorf("a conversation taken from the model's arguments: %v; want it refused, saying why and what to use", err)
	}
}

// A reconcilable tool whose server keeps no reference is checked by what
// the action asked for (a passenger has one seat on a flight: the input
// identifies the booking, input_identifies): the guard keeps the input, sealed with input_key,
// while the action is unknown — also across a restart, where the next
// write of the conversation finds the earlier action by its input.
func TestGuard_ACheckFindsTheActionByItsInputAcrossARestart(t *testing.T) {
	t.Setenv("GUARD_INPUT_KEY", strings.Repeat("ab", 32))
	const cfg = `{"principal": "ana@example.com", "input_key": "${GUARD_INPUT_KEY}", "mcpServers": {"airline": {"command": "x", "tools": {
	  "book": {"class": "reconcilable", "check": {"tool": "find_by_passenger",
	    "arguments": {"flight": "${input/flight}", "passenger": "${input/passenger}"},
	    "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false},
	    "input_identifies": true}},
	  "find_by_passenger": {"class": "read_only"}}}}}`
	a := &airline{findDown: true}
	path := filepath.Join(t.TempDir(), "guard.db")
	r := newRig(t, a, rigOptions{config: cfg, path: path})
	a.lose(1)
	_, env := r.call("book", lunchFlight)
	if env.Status != envelope.UnknownOutcome {
		t.Fatalf("a booking whose reply was lost while the search is down: %s; want unknown_outcome", env)
	}
	raw, err := r.guard.Store().Get(context.Background(), env.RequestRef)
	if err != nil || len(raw.Input) == 0 || strings.Contains(string(raw.Input), "Ana Lima") {
		t.Fatalf("the kept input %q, %v: want it kept, sealed", raw.Input, err)
	}
	r.client.Close()
	r.guard.Close()

	a.mu.Lock()
	a.findDown = false
	a.mu.Unlock()
	r2 := newRig(t, a, rigOptions{config: cfg, path: path})
	_, reworded := r2.call("book", map[string]any{"flight": "TP1234", "passenger": "Ana Lima Silva"})
	t.Logf("after the restart, a reworded booking: %s", reworded)
	if reworded.Error == nil || reworded.Error.Code != envelope.CodeEarlierApplied {
		t.Errorf("the reworded booking after the restart: %s; want earlier_action_applied (the first found by its input)", reworded)
	}
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
	if rec, err := r2.guard.Store().Get(context.Background(), env.RequestRef); err != nil || rec.Input != nil {
		t.Errorf("the settled action still keeps an input: %q, %v", rec.Input, err)
	}
}

// seats is a third party's booking server for the checks by input: book
// makes a booking (unless hang is set: then it takes the request and
// never books, until its caller gives up), and find_by_passenger looks a
// booking up by what it asked for, the only way its bookings are found.
type seats struct {
	mu       sync.Mutex
	bookings []booking
	hang     atomic.Bool
	loseNext atomic.Int32 // book_ref: the next n replies are lost after the booking is made
}

func (s *seats) server() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "seats", Version: "1"}, nil)
	type in struct {
		Flight    string `json:"flight"`
		Passenger string `json:"passenger"`
	}
	type found struct {
		Found   bool     `json:"found"`
		Booking *booking `json:"booking,omitempty"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "book", Description: "Book one seat."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in in) (*mcp.CallToolResult, booking, error) {
			if s.hang.Load() {
				<-ctx.Done() // the request never books
				return nil, booking{}, ctx.Err()
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			b := booking{ID: fmt.Sprintf("BK-%d", len(s.bookings)+1), Flight: in.Flight, Passenger: in.Passenger}
			s.bookings = append(s.bookings, b)
			return nil, b, nil
		})
	type refIn struct {
		Flight    string `json:"flight"`
		Passenger string `json:"passenger"`
		Reference string `json:"client_reference,omitempty"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "book_ref", Description: "Book one seat, held until the airline confirms it, keeping a client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in refIn) (*mcp.CallToolResult, booking, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			b := booking{ID: fmt.Sprintf("BK-%d", len(s.bookings)+1), Flight: in.Flight, Passenger: in.Passenger, Reference: in.Reference}
			s.bookings = append(s.bookings, b)
			if s.loseNext.Add(-1) >= 0 {
				return nil, booking{}, errReplyLost
			}
			return nil, b, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "lookup", Description: "Look a booking up by its client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
			Reference string `json:"client_reference"`
		}) (*mcp.CallToolResult, map[string]any, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, b := range s.bookings {
				if b.Reference == in.Reference {
					return nil, map[string]any{"booking": map[string]any{"id": b.ID, "state": "held"}}, nil
				}
			}
			return nil, map[string]any{"booking": nil}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "find_by_passenger", Description: "Find a booking by flight and passenger."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in in) (*mcp.CallToolResult, found, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, b := range s.bookings {
				if b.Flight == in.Flight && b.Passenger == in.Passenger {
					return nil, found{Found: true, Booking: &b}, nil
				}
			}
			return nil, found{}, nil
		})
	return srv
}

func (s *seats) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bookings)
}

// seatsGuard is a guard in front of s, with cfg, and a client of it.
func seatsGuard(t *testing.T, s *seats, cfg string) *mcp.ClientSession {
	t.Helper()
	c, err := mcpguard.ParseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	c.Store.Path = filepath.Join(t.TempDir(), "guard.db")
	up := s.server()
	g, err := mcpguard.New(context.Background(), c, &mcpguard.Options{
		Logger:    discard(),
		Transport: serving(up),
		Tune: func(_ string, o *agenttool.Options) {
			o.Retry = agenttool.RetryPolicy{MaxAttempts: 1, InitialInterval: time.Millisecond, MaxElapsed: time.Second}
			o.WaitTimeout = time.Second
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return connect(t, g)
}

// The envelope never lies (I2), also when a check finds an action by what
// it asked for. In conversation 1 the user books TP1234 for Ana Lima:
// done. In conversation 2 — another action, with another key — the same
// booking is asked for, and the server takes the request and never books
// it (it hangs until the guard's attempt timeout). The guard's check asks
// find_by_passenger for TP1234 and Ana Lima, which finds conversation 1's
// booking: the guard answers success, reconciled, with the other action's
// booking as this one's result, though this action was never applied.
// (Across principals the same check hands one user another's booking.)
// A check by input cannot tell two actions that asked the same apart; its
// "applied" must not settle an action it may not have found.
func TestGuard_ACheckByInputNeverSettlesAnActionWithAnothersBooking(t *testing.T) {
	t.Setenv("GUARD_INPUT_KEY", strings.Repeat("ab", 32))
	const cfg = `{"principal": "ana@example.com", "input_key": "${GUARD_INPUT_KEY}", "conversation": {"meta": "conversation_id"},
	  "mcpServers": {"seats": {"command": "x", "tools": {
	  "book": {"class": "reconcilable", "attempt_timeout": "300ms", "check": {"tool": "find_by_passenger",
	    "arguments": {"flight": "${input/flight}", "passenger": "${input/passenger}"},
	    "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
	  "find_by_passenger": {"class": "read_only"}}}}}`
	s := &seats{}
	cs := seatsGuard(t, s, cfg)
	if _, env := call(t, cs, "book", lunchFlight, mcp.Meta{"conversation_id": "c1"}); env.Status != envelope.Success {
		t.Fatalf("the first booking, in conversation 1: %s", env)
	}
	s.hang.Store(true)
	res, env := call(t, cs, "book", lunchFlight, mcp.Meta{"conversation_id": "c2"})
	t.Logf("conversation 2's booking, never made: %s %s", env, resultText(res))
	if n := s.count(); n != 1 {
		t.Fatalf("%d bookings, want 1 (conversation 2's request never booked)", n)
	}
	if env.Status == envelope.Success {
		t.Errorf("conversation 2's booking, which the server never made, answered success (%s) with conversation 1's booking %s; want unknown_outcome",
			env, resultText(res))
	}
}

// One effect per action (I1): a check's not_applied that says "equals":
// null matches only a null. The server's lookup answers {"booking": null}
// when it has no booking of a reference, and the booking, with its state,
// when it has one; the operator configures applied as a confirmed booking
// and not_applied as {"pointer": "/booking", "equals": null}. A booking
// is made, held (not confirmed yet), and its reply is lost. The guard reads
// "equals": null as no equals at all — "the value must only exist" — so
// the held booking matches not_applied, and the retry books a second seat.
func TestGuard_NotAppliedEqualsNullMatchesOnlyNull(t *testing.T) {
	const cfg = `{"principal": "ana@example.com", "mcpServers": {"seats": {"command": "x", "tools": {
	  "book_ref": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "200ms",
	    "check": {"tool": "lookup", "arguments": {"client_reference": "${ref}"},
	    "applied": {"pointer": "/booking/state", "equals": "confirmed"}, "not_applied": {"pointer": "/booking", "equals": null}}},
	  "lookup": {"class": "read_only"}}}}}`
	s := &seats{}
	s.loseNext.Store(1)
	cs := seatsGuard(t, s, cfg)
	_, env := call(t, cs, "book_ref", lunchFlight, nil)
	t.Logf("a held booking whose reply was lost: %s", env)
	if n := s.count(); n != 1 {
		t.Fatalf("%d bookings after the first call, want 1", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for env.Status == envelope.UnknownOutcome && time.Now().Before(deadline) && s.count() == 1 {
		time.Sleep(300 * time.Millisecond) // until a not_applied is trusted (attempt_timeout and a second)
		_, env = call(t, cs, "book_ref", lunchFlight, nil)
	}
	t.Logf("the retry: %s", env)
	if n := s.count(); n != 1 {
		t.Errorf("%d bookings: a held booking was read as not applied by \"equals\": null, and booked again; want 1", n)
	}
}

// A server's progress notifications reach the client that asked it, under
// the client's own token — and no other. Ana's client books a seat through
// the guard, asking for progress; the guard gives the seats server a token
// of its own ("retrysafe-guard-1"). A second server behind the same guard
// — another party's, configured for another tool — is called by another
// client, and sends progress notifications under the guard's tokens, which
// are a counter. The guard looks a token up among all its calls, whichever
// server sends it: Ana's client receives the other server's message under
// its own token, as progress of its booking.
func TestGuard_ProgressReachesOnlyTheClientThatAskedThatServer(t *testing.T) {
	const cfg = `{"principal": "ana@example.com", "mcpServers": {
	  "seats": {"command": "x", "tools": {"book": {"class": "at_most_once"}}},
	  "other": {"command": "y", "tools": {"ping": {"class": "read_only"}}}}}`
	c, err := mcpguard.ParseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	c.Store.Path = filepath.Join(t.TempDir(), "guard.db")
	s := &seats{}
	seatsUp := s.server()
	other := mcp.NewServer(&mcp.Implementation{Name: "other", Version: "1"}, nil)
	mcp.AddTool(other, &mcp.Tool{Name: "ping", Description: "Ping."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]string, error) {
			for i := 1; i <= 3; i++ { // the guard's tokens, guessed
				req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: fmt.Sprintf("retrysafe-guard-%d", i), Progress: 1, Total: 1, Message: "from the other server"})
			}
			return nil, map[string]string{"pong": "yes"}, nil
		})
	g, err := mcpguard.New(context.Background(), c, &mcpguard.Options{
		Logger: discard(),
		Transport: func(name string, _ *mcpguard.Server) (mcp.Transport, error) {
			up := seatsUp
			if name == "other" {
				up = other
			}
			ct, st := mcp.NewInMemoryTransports()
			if _, err := up.Connect(context.Background(), st, nil); err != nil {
				return nil, err
			}
			return ct, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	var mu sync.Mutex
	var got []string
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	ana, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			got = append(got, fmt.Sprintf("%v: %s", req.Params.ProgressToken, req.Params.Message))
			mu.Unlock()
		},
	}).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ana.Close()
	if _, env := call(t, ana, "book", lunchFlight, mcp.Meta{"progressToken": "mine"}); env.Status != envelope.Success {
		t.Fatalf("the booking: %s", env)
	}
	someone := connect(t, g)
	if res, _ := call(t, someone, "ping", map[string]any{}, nil); res.IsError {
		t.Fatalf("ping: %s", resultText(res))
	}
	time.Sleep(500 * time.Millisecond) // notifications are delivered apart from answers
	mu.Lock()
	defer mu.Unlock()
	for _, n := range got {
		if strings.Contains(n, "other server") {
			t.Errorf("Ana's client got progress %q, sent by a server it never called; want only the seats server's", got)
			break
		}
	}
}

// Arguments the server's input schema refuses are refused at the guard,
// nothing sent and nothing held: sent, the server's refusal would be an
// unknown outcome (MCP reports an error after acting the same way), and an
// at-most-once tool would be fenced until a person acts. The model fixes
// its call and the next one goes through, once.
func TestGuard_ArgumentsTheSchemaRefusesAreRefusedUnsent(t *testing.T) {
	c := &counter{}
	g := guardOver(t, c.server("send_message"), `{"principal": "ana@example.com", "mcpServers": {"sender": {"command": "sender-mcp",
	  "tools": {"send_message": {"class": "at_most_once"}}}}}`, mcpguard.Options{})
	cs := connect(t, g)
	for name, args := range map[string]map[string]any{
		"text is a number":  {"to": "#team", "text": 42},
		"to is a list":      {"to": []string{"#team"}, "text": "Lunch at one?"},
		"an unknown member": {"to": "#team", "text": "Lunch at one?", "urgent": true},
	} {
		res, env := call(t, cs, "send_message", args, nil)
		t.Logf("%s: %s", name, env)
		if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != envelope.CodeInvalidInput || !res.IsError {
			t.Errorf("%s: %s, want definite_failure invalid_input", name, env)
		}
	}
	if n := c.count(); n != 0 {
		t.Fatalf("%d messages sent for arguments the schema refuses", n)
	}
	if _, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch at one?"}, nil); env.Status != envelope.Success {
		t.Errorf("the corrected call: %s, want success (nothing held)", env)
	}
	if n := c.count(); n != 1 {
		t.Errorf("%d messages sent, want 1", n)
	}
}

// A server's schema the validator cannot read (another draft) does not
// stop its tool: its calls go unchecked, as before, and the guard says so
// in its log.
func TestGuard_AnUnreadableSchemaLeavesCallsUnchecked(t *testing.T) {
	up := mcp.NewServer(&mcp.Implementation{Name: "old", Version: "1"}, nil)
	var sent atomic.Int64
	up.AddTool(&mcp.Tool{Name: "send_message", Description: "Send a message.", InputSchema: json.RawMessage(`{
	  "$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
	  "properties": {"to": {"type": "string"}, "text": {"type": "string"}}, "required": ["to", "text"]}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			sent.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sent"}}}, nil
		})
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"sender": {"command": "sender-mcp",
	  "tools": {"send_message": {"class": "at_most_once"}}}}}`, mcpguard.Options{Logger: log})
	cs := connect(t, g)
	if _, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch at one?"}, nil); env.Status != envelope.Success {
		t.Errorf("a call to a tool whose schema is draft-04: %s, want success", env)
	}
	mu.Lock()
	defer mu.Unlock()
	if sent.Load() != 1 || !strings.Contains(logged.String(), "calls go unchecked") {
		t.Errorf("sent %d; log:\n%s\nwant one message sent and a warning that calls go unchecked", sent.Load(), logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A legacy HTTP+SSE server ("type": "sse") is guarded as any other: its
// reply lost on the event stream, the keyed booking is unknown, and the
// retry under the same key books nothing more; the reconcilable one is
// checked at the server, not sent again.
func TestGuard_ALegacySSEServerIsGuarded(t *testing.T) {
	a := &airline{}
	up := a.server()
	srv := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(srv.Close)
	cs := connect(t, guardOver(t, nil, strings.Replace(guardConfig, `"command": "airline-mcp"`, `"type": "sse", "url": "`+srv.URL+`"`, 1),
		mcpguard.Options{Tune: func(_ string, o *agenttool.Options) { o.Retry = agenttool.RetryPolicy{MaxAttempts: 1} }}))
	a.lose(1)
	_, env := call(t, cs, "book", lunchFlight, nil)
	_, again := call(t, cs, "book", lunchFlight, nil)
	t.Logf("first: %s\nretry: %s", env, again)
	if env.Status != envelope.UnknownOutcome || again.Status != envelope.Success {
		t.Errorf("a keyed booking whose reply was lost, then retried: %s, %s; want unknown_outcome, then success", env.Status, again.Status)
	}
	a.lose(1)
	_, noted := call(t, cs, "book_noted", map[string]any{"flight": "TP1235", "passenger": "Ana Lima"}, nil)
	if noted.Status != envelope.Success || !noted.Reconciled {
		t.Errorf("a reconcilable booking whose reply was lost: %s; want success, reconciled", noted)
	}
	if n := a.count(); n != 2 {
		t.Errorf("%d bookings for two logical actions, want 2", n)
	}
}

// The calls of many clients go to a server on HTTP over connections kept
// open: a second round of concurrent calls dials nothing new (net/http's
// default keeps two a host, and each call past the second dialled, on
// https a handshake each).
func TestGuard_ConcurrentCallsReuseTheServersConnections(t *testing.T) {
	const concurrent = 16
	up := (&airline{}).server()
	var dials atomic.Int64
	var mu sync.Mutex
	states := map[net.Conn]http.ConnState{}
	streams := map[net.Conn]bool{} // connections that carry a GET's event stream, not calls
	type connKey struct{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			time.Sleep(20 * time.Millisecond) // so that a round's calls overlap
		} else {
			mu.Lock()
			streams[r.Context().Value(connKey{}).(net.Conn)] = true
			mu.Unlock()
		}
		mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, &mcp.StreamableHTTPOptions{Stateless: true}).ServeHTTP(w, r)
	}))
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
		mu.Lock()
		states[c] = s
		mu.Unlock()
	}
	// settled waits until the connections of the round's calls have
	// answered their requests, so that the next round finds them free.
	settled := func() {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			busy := 0
			for c, s := range states {
				if (s == http.StateActive || s == http.StateNew) && !streams[c] {
					busy++
				}
			}
			mu.Unlock()
			if busy <= 1 { // the guard's session keeps one request open
				return
			}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	cs := connect(t, guardOver(t, nil, strings.Replace(guardConfig, `"command": "airline-mcp"`, `"url": "`+srv.URL+`"`, 1), mcpguard.Options{}))
	round := func() int64 {
		before := dials.Load()
		var wg sync.WaitGroup
		for range concurrent {
			wg.Go(func() {
				if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_flights", Arguments: map[string]any{"from": "LIS"}}); err != nil || res.IsError {
					t.Errorf("list_flights: %v %+v", err, res)
				}
			})
		}
		wg.Wait()
		return dials.Load() - before
	}
	first := round()
	settled()
	if second := round(); second > concurrent/2 {
		t.Errorf("a second round of %d concurrent calls opened %d new connections to the server (the first %d); want them kept open and used again", concurrent, second, first)
	}
}

// A configuration's "sse" server needs the URL of its event stream.
func TestConfig_ALegacySSEServerNeedsAURL(t *testing.T) {
	_, err := mcpguard.ParseConfig([]byte(`{"principal": "ana", "mcpServers": {"old": {"type": "sse", "command": "old-mcp"}}}`))
	if err == nil || !strings.Contains(err.Error(), "mcpServers.old.type") || !strings.Contains(err.Error(), "url") {
		t.Errorf("an sse server without a url: %v", err)
	}
}

// lateGuard runs a guard whose book_noted (at most once) waits 150ms for
// the airline, which commits a booking in 400ms, with listen_late as
// given.
func lateGuard(t *testing.T, a *airline, listenLate string) *mcp.ClientSession {
	t.Helper()
	up := slowAirline(a, 400*time.Millisecond)
	g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
	  "book_noted": {"class": "at_most_once", "ref_argument": "client_reference", "attempt_timeout": "150ms", "listen_late": "`+listenLate+`"}}}}}`,
		mcpguard.Options{})
	return connect(t, g)
}

// I4 with a server slower than the attempt timeout: the call is unknown
// at its deadline, but the guard goes on listening, and the server's late
// answer settles the action: the model's retry then answers success with
// the booking the server made, and nothing is sent twice. With
// listen_late "0s" the call is cancelled at the server at its deadline,
// and the retry stays unknown.
func TestGuard_ALateAnswerOfTheServerSettlesTheAction(t *testing.T) {
	for _, tc := range []struct {
		listenLate string
		settled    bool
	}{{"2s", true}, {"0s", false}} {
		t.Run("listen_late="+tc.listenLate, func(t *testing.T) {
			a := &airline{}
			cs := lateGuard(t, a, tc.listenLate)
			_, first := call(t, cs, "book_noted", lunchFlight, nil)
			if first.Status != envelope.UnknownOutcome {
				t.Fatalf("a call past its attempt timeout: %s; want unknown_outcome", first)
			}
			// The server commits (400ms), and its answer reaches the guard.
			var (
				again envelope.Envelope
				res   *mcp.CallToolResult
			)
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if res, again = call(t, cs, "book_noted", lunchFlight, nil); again.Status != envelope.UnknownOutcome {
					break
				}
				if !tc.settled && a.count() == 1 && time.Since(deadline.Add(-5*time.Second)) > time.Second {
					break
				}
			}
			t.Logf("first: %s\nretry: %s %s", first, again, resultText(res))
			if n := a.count(); n != 1 {
				t.Fatalf("%d bookings for one action, want 1", n)
			}
			switch {
			case tc.settled && (again.Status != envelope.Success || !strings.Contains(resultText(res), "TP1234")):
				t.Errorf("after the server's late answer, the retry: %s; want success with the booking", again)
			case !tc.settled && again.Status == envelope.Success:
				t.Errorf("with listen_late 0s, the retry answered success: nothing heard the server's answer")
			}
		})
	}
}

// Bad input gets a clear answer and loses nothing: a request that is not
// JSON-RPC, a call of a tool the guard does not list, and arguments
// larger than a guarded tool takes are refused before anything is
// recorded or sent, and the guard serves the next call as before.
func TestGuard_BadInputRecordsNothingAndSendsNothing(t *testing.T) {
	a := &airline{}
	r := newRig(t, a, rigOptions{})
	front := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return r.guard.Server() }, nil))
	t.Cleanup(front.Close)

	for _, body := range []string{`{"jsonrpc": "2.0", "id": 1, "method": `, `[1, 2, 3]`, `{"id": 1, "method": "tools/call"}`} {
		req, _ := http.NewRequest(http.MethodPost, front.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("%q: %s %s; want a 4xx refusal", body, resp.Status, b)
		}
	}

	res, err := r.client.CallTool(context.Background(), &mcp.CallToolParams{Name: "cancel_everything", Arguments: map[string]any{}})
	t.Logf("a tool the guard does not list: %v %v", err, res)
	if err == nil && (res == nil || !res.IsError) {
		t.Errorf("a tool the guard does not list was answered as a success")
	}

	huge := map[string]any{"flight": "TP1234", "passenger": strings.Repeat("Ana ", 300_000)}
	hugeRes, env := r.call("book", huge)
	t.Logf("oversized: %s", env)
	if !hugeRes.IsError || env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != envelope.CodeInvalidInput ||
		!strings.Contains(env.Error.Message, "at most") {
		t.Errorf("arguments larger than the tool takes: %s; want definite_failure invalid_input saying the limit", env)
	}
	if n := a.count(); n != 0 {
		t.Fatalf("%d bookings after bad input, want 0", n)
	}
	op, err := agenttool.NewOperator(r.guard.Store())
	if err != nil {
		t.Fatal(err)
	}
	counts, err := op.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range counts {
		if c.Records > 0 {
			t.Errorf("bad input left %d records of %s (%v)", c.Records, c.Tool, c.State)
		}
	}
	if _, env := r.call("book", lunchFlight); env.Status != envelope.Success || a.count() != 1 {
		t.Errorf("the next good call: %s, %d bookings", env, a.count())
	}
}

// uuidAirline is the airline with a server whose key and reference
// arguments take UUIDs ("format": "uuid"), and which refuses anything
// else there, after the call reached it, as a server validating with zod
// or pydantic does; maxKey, if set, is the key argument's maxLength.
func uuidAirline(a *airline, maxKey int) *mcp.Server {
	key := map[string]any{"type": "string", "format": "uuid"}
	if maxKey > 0 {
		key = map[string]any{"type": "string", "maxLength": maxKey}
	}
	return uuidAirlineWith(a, key, nil)
}

// uuidAirlineWith is uuidAirline with key as the schema of its key and
// reference arguments, defs as its input schemas' $defs.
func uuidAirlineWith(a *airline, key, defs map[string]any) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"}, nil)
	schema := func(arg string) map[string]any {
		m := map[string]any{"type": "object", "required": []string{"flight", "passenger"}, "properties": map[string]any{
			"flight": map[string]any{"type": "string"}, "passenger": map[string]any{"type": "string"}, arg: key}}
		if defs != nil {
			m["$defs"] = defs
		}
		return m
	}
	refused := func(field string) *mcp.CallToolResult {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: field + " must be a UUID"}}}
	}
	// book takes its key as a UUID, book_noted its reference.
	booking := func(name, arg string, uuidOf func(bookIn) string) {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: schema(arg)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in bookIn
			json.Unmarshal(req.Params.Arguments, &in)
			// A server that asks for a version asserts it, as pydantic's
			// UUID4 does.
			if u, err := uuid.Parse(uuidOf(in)); err != nil || (key["format"] == "uuid4" && u.Version() != 4) {
				return refused(arg), nil
			}
			res, b, err := a.book(in)
			if res == nil && err == nil {
				res = &mcp.CallToolResult{StructuredContent: b, Content: []mcp.Content{&mcp.TextContent{Text: b.ID}}}
			}
			return res, err
		})
	}
	booking("book", "idempotency_key", func(in bookIn) string { return in.IdempotencyKey })
	booking("book_noted", "client_reference", func(in bookIn) string { return in.Reference })
	findSchema := map[string]any{"type": "object", "properties": map[string]any{"client_reference": key}}
	if defs != nil {
		findSchema["$defs"] = defs
	}
	s.AddTool(&mcp.Tool{Name: "find_booking", InputSchema: findSchema},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in bookIn
			json.Unmarshal(req.Params.Arguments, &in)
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, b := range a.bookings {
				if b.Reference == in.Reference {
					return &mcp.CallToolResult{StructuredContent: map[string]any{"found": true, "booking": b}, Content: []mcp.Content{&mcp.TextContent{Text: b.ID}}}, nil
				}
			}
			return &mcp.CallToolResult{StructuredContent: map[string]any{"found": false}, Content: []mcp.Content{&mcp.TextContent{Text: "none"}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "list_flights", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "TP1234"}}}, nil
	})
	return s
}

// A server whose idempotency key or reference argument takes UUIDs gets
// each action's reference in its UUID form (agenttool.RefUUID), the same
// on every resend and in the check: a lost reply is resent under the same
// key and books once, and the check finds the action by the form it was
// given. Before, it got the reference, refused it after the call reached
// it, and every call was unknown.
func TestGuard_AnArgumentThatTakesUUIDsGetsTheReferencesUUID(t *testing.T) {
	for _, c := range []struct {
		form, format string
		of           func(ref string) string
	}{{"uuid", "uuid", agenttool.RefUUID}, {"uuid4", "uuid4", agenttool.RefUUID4}} {
		t.Run(c.form, func(t *testing.T) {
			a := &airline{}
			config := strings.NewReplacer(`"key_argument": "idempotency_key"`, `"key_argument": "idempotency_key", "key_form": "`+c.form+`"`,
				`"ref_argument": "client_reference"`, `"ref_argument": "client_reference", "key_form": "`+c.form+`"`).Replace(guardConfig)
			cs := connect(t, guardOver(t, uuidAirlineWith(a, map[string]any{"type": "string", "format": c.format}, nil), config, mcpguard.Options{}))
			a.lose(1)
			_, first := call(t, cs, "book", lunchFlight, nil)
			_, again := call(t, cs, "book", lunchFlight, nil)
			if first.Status != envelope.Success || first.Attempts != 2 || !again.Replayed || a.count() != 1 {
				t.Fatalf("a keyed booking whose reply was lost, resent, then called again: %s, %s, %d bookings; want success after a resend, its replay, one booking", first, again, a.count())
			}
			if _, ok := a.byKey[c.of(again.RequestRef)]; !ok {
				t.Errorf("the server's keys %v; want the %s form of %s", a.byKey, c.form, again.RequestRef)
			}
			a.lose(1)
			_, noted := call(t, cs, "book_noted", map[string]any{"flight": "TP1235", "passenger": "Ana Lima"}, nil)
			if noted.Status != envelope.Success || !noted.Reconciled || a.count() != 2 || a.bookings[1].Reference != c.of(noted.RequestRef) {
				t.Errorf("a reconcilable booking whose reply was lost: %s, %d bookings (%+v); want it found by its reference's %s form, not sent again", noted, a.count(), a.bookings, c.form)
			}
		})
	}
}

// A key argument whose schema asks for a UUID, or takes neither a
// reference nor a UUID, stops the guard at start, naming the field and
// what to do: whether the server takes any string there is the
// operator's to say, and a key the server refuses fails every call after
// it was sent.
func TestGuard_AKeyArgumentThatRefusesReferencesStopsTheGuard(t *testing.T) {
	for _, c := range []struct {
		name   string
		maxKey int
		form   string
		want   []string
	}{
		{"a UUID, no form said", 0, "", []string{"mcpServers.airline.tools.book.key_argument", `"key_form": "uuid"`}},
		{"8 characters at most", 8, "", []string{"mcpServers.airline.tools.book.key_argument", "maxLength"}},
		{"8 characters at most, as UUIDs", 8, "uuid", []string{"mcpServers.airline.tools.book.key_form", "maxLength"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			config := guardConfig
			if c.form != "" {
				config = strings.Replace(config, `"key_argument": "idempotency_key"`, `"key_argument": "idempotency_key", "key_form": "`+c.form+`"`, 1)
			}
			cfg, err := mcpguard.ParseConfig([]byte(config))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
			g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: serving(uuidAirline(&airline{}, c.maxKey)), Logger: discard()})
			if err == nil {
				g.Close()
				t.Fatal("the guard started")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the guard's error: %v; want it to name %s", err, w)
				}
			}
		})
	}
	// With the form said, a schema that asks for a UUID is the
	// operator's word against: the reference goes as it is.
	cfg, err := mcpguard.ParseConfig([]byte(strings.NewReplacer(`"key_argument": "idempotency_key"`, `"key_argument": "idempotency_key", "key_form": "reference"`,
		`"ref_argument": "client_reference"`, `"ref_argument": "client_reference", "key_form": "reference"`).Replace(guardConfig)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
	g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: serving(uuidAirline(&airline{}, 0)), Logger: discard()})
	if err != nil {
		t.Fatalf("key_form reference in front of a schema that asks for a UUID: %v", err)
	}
	g.Close()
}

// A key argument asks for a UUID however its schema says so — an optional
// UUID as pydantic writes one (anyOf a UUID or null), a UUID by $ref, a
// version 4 UUID (pydantic's UUID4, "format": "uuid4") — and the guard
// stops at start until key_form says which form the server takes (or,
// where the schema asks for a UUID no request reference's UUID form is,
// that it takes neither). Started, it sent the reference into an argument
// the server refuses it in: every call refused after it was sent.
func TestGuard_AnArgumentThatAsksForAUUIDStopsTheGuardUntilItsFormIsSaid(t *testing.T) {
	uuidKey := map[string]any{"type": "string", "format": "uuid"}
	for _, c := range []struct {
		name string
		key  map[string]any
		defs map[string]any
		want []string
	}{
		{"an optional UUID", map[string]any{"anyOf": []any{uuidKey, map[string]any{"type": "null"}}, "default": nil}, nil,
			[]string{"mcpServers.airline.tools.book.key_argument", `"key_form": "uuid"`}},
		{"a UUID by $ref", map[string]any{"$ref": "#/$defs/Key"}, map[string]any{"Key": uuidKey},
			[]string{"mcpServers.airline.tools.book.key_argument", `"key_form": "uuid"`}},
		{"a version 4 UUID", map[string]any{"type": "string", "format": "uuid4"}, nil,
			[]string{"mcpServers.airline.tools.book.key_argument", `"key_form": "uuid4"`}},
		{"a version 7 UUID", map[string]any{"type": "string", "format": "uuid7"}, nil,
			[]string{"mcpServers.airline.tools.book.key_argument", "refuses the UUID forms"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := mcpguard.ParseConfig([]byte(guardConfig))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
			a := &airline{}
			g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: serving(uuidAirlineWith(a, c.key, c.defs)), Logger: discard()})
			if err == nil {
				defer g.Close()
				_, env := call(t, connect(t, g), "book", lunchFlight, nil)
				t.Fatalf("the guard started, and a booking answered %s (%d booked); want it stopped at start, naming key_form", env, a.count())
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the guard's error: %v; want it to name %s", err, w)
				}
			}
		})
	}
	// Said, the UUID form goes, and books once.
	a := &airline{}
	config := strings.NewReplacer(`"key_argument": "idempotency_key"`, `"key_argument": "idempotency_key", "key_form": "uuid"`,
		`"ref_argument": "client_reference"`, `"ref_argument": "client_reference", "key_form": "uuid"`).Replace(guardConfig)
	cs := connect(t, guardOver(t, uuidAirlineWith(a, map[string]any{"anyOf": []any{uuidKey, map[string]any{"type": "null"}}}, nil), config, mcpguard.Options{}))
	if _, env := call(t, cs, "book", lunchFlight, nil); env.Status != envelope.Success || a.count() != 1 {
		t.Errorf("key_form uuid in front of an optional UUID: %s, %d booked; want one booking", env, a.count())
	}
}

// I2 and the conversation's scope through a retrysafe upstream
// (key_argument "_meta"): with conversation set, two conversations of one
// user are two scopes, and the same message asked in each is two actions
// to the guard (two references, two fences). But the guard sends the
// upstream nothing of the conversation the upstream keys by, and the
// upstream keys by its own caller — the guard — so the second
// conversation's message would meet the first's action there and be
// answered with its result, never sent. The guard refuses the
// configuration at start, naming the field and the conversation.
func TestGuard_ARetrysafeUpstreamKeepsConversationsApart(t *testing.T) {
	_, err := mcpguard.ParseConfig([]byte(`{
	  "principal": "ana@example.com",
	  "conversation": {"meta": "conversation_id"},
	  "mcpServers": {"sender": {"command": "sender-mcp",
	    "tools": {"send_message": {"class": "keyed", "key_argument": "_meta"}}}}}`))
	if err == nil || !strings.Contains(err.Error(), "key_argument") || !strings.Contains(err.Error(), "conversation") {
		t.Errorf("a retrysafe upstream with conversations: %v; want refused, naming key_argument and the conversation", err)
	}
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

// A server that changes a guarded tool's input schema while the guard
// runs gets schema_changed until the guard restarts — what makes its keys
// may have changed — also when its new listing names the tool twice, the
// old schema beside the new. The airline's book changes: the new version
// takes no idempotency key (its schema drops idempotency_key, and it
// books whatever key it is sent), and the server, after
// notifications/tools/list_changed, lists book twice, the old entry and
// the new. At start such a listing stops the guard ("lists the tool
// twice; its listing is not usable"); later the guard logs that it did
// not take the new list, and goes on guarding book with the old schema:
// the next booking's reply is lost, the guard resends it under its key,
// which the new book ignores, and two seats are booked for one action,
// where a listing of the new schema alone answers schema_changed and
// sends nothing. A listing that is not usable says no more that the
// tool is unchanged than one that changes it.
func TestGuard_AChangedSchemaListedBesideTheOldOneIsSchemaChanged(t *testing.T) {
	a := &airline{}
	r := newRig(t, a, rigOptions{})
	var changed atomic.Bool
	r.up.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && changed.Load() && p.Name == "book" {
				var args map[string]any
				if json.Unmarshal(p.Arguments, &args) == nil {
					delete(args, "idempotency_key") // the new book takes no key
					p.Arguments, _ = json.Marshal(args)
				}
			}
			res, err := next(ctx, method, req)
			if lr, ok := res.(*mcp.ListToolsResult); ok && changed.Load() {
				for _, tool := range lr.Tools {
					if tool.Name == "book" {
						nt := *tool
						nt.InputSchema = json.RawMessage(`{"type":"object","properties":{"flight":{"type":"string"},"passenger":{"type":"string"}},"required":["flight","passenger"],"additionalProperties":false}`)
						lr.Tools = append(lr.Tools, &nt)
						break
					}
				}
			}
			return res, err
		}
	})
	changed.Store(true)
	// Any change of the server's tools makes it say list_changed.
	r.up.AddTool(&mcp.Tool{Name: "ping", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	time.Sleep(500 * time.Millisecond) // the guard reads the new listing
	a.lose(1)
	_, env := r.call("book", lunchFlight)
	t.Logf("book after the server listed it twice, its schema changed in one: %s; %d bookings", env, a.count())
	if n := a.count(); n > 1 {
		t.Errorf("%d bookings for one action, want at most 1", n)
	}
	if env.Status == envelope.Success && a.count() != 1 || env.Error == nil || env.Error.Code != "schema_changed" {
		t.Errorf("book after its server listed a changed schema beside the old: %s; want definite_failure schema_changed, nothing sent", env)
	}
}
