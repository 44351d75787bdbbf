package mcpguard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/envelope"
)

// asker is a server whose send_message asks the user twice — "Send it?",
// then "Really?" — before it sends, and counts what it sends. Its state
// is in requestState, as SEP-2322 has it.
type asker struct {
	mu   sync.Mutex
	sent []string
}

func (a *asker) server() *mcp.Server {
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	yes := map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}
	mcp.AddTool(up, &mcp.Tool{Name: "send_message", Description: "Send a message, once the user confirms twice."},
		func(_ context.Context, req *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, map[string]string, error) {
			switch req.Params.RequestState {
			case "":
				return &mcp.CallToolResult{RequestState: "asked-once", InputRequests: mcp.InputRequestMap{
					"confirm": &mcp.ElicitParams{Message: "Send it?", RequestedSchema: yes}}}, nil, nil
			case "asked-once":
				return &mcp.CallToolResult{RequestState: "asked-twice", InputRequests: mcp.InputRequestMap{
					"really": &mcp.ElicitParams{Message: "Really?", RequestedSchema: yes}}}, nil, nil
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			a.sent = append(a.sent, in.Text)
			return nil, map[string]string{"sent": in.Text}, nil
		})
	return up
}

func (a *asker) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.sent)
}

const askerConfig = `{"principal": "ana@example.com", "mcpServers": {"sender": {"command": "sender-mcp",
  "tools": {"send_message": {"class": "at_most_once"}}}}}`

// A client of the revision before 2026-07-28 reads a result that carries
// only inputRequests (no resultType: the SDK marks one only for a session
// of the later revision) as an empty success. The SDK answers such a
// client's first question for it, once; the guard must never hand it a
// second one bare — whatever revision the request's _meta claims, it is the
// session's revision that decides how the SDK sends the result.
func TestRelay_AnOldSessionNeverReadsASecondQuestionAsASuccess(t *testing.T) {
	a := &asker{}
	g := guardOver(t, a.server(), askerConfig, mcpguard.Options{})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int64
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "old-desktop", Version: "1"}, &mcp.ClientOptions{
		// An old client knows nothing of multi-round-trip results.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		}}).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	// The request's _meta names the later revision (a client, or a proxy in
	// front of it, that stamps it), on a session of the earlier one.
	meta := mcp.Meta{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{}}}
	res, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch?"}, meta)
	if !res.IsError && env.Status != envelope.Success {
		t.Fatalf("an old client reads success (isError false, %d content blocks, envelope %q, %d input requests it cannot see), "+
			"after %d questions and %d messages sent; want a definite failure that names the second question",
			len(res.Content), env.Status, len(res.InputRequests), asked.Load(), a.count())
	}
	if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != mcptool.CodeInputRequired || a.count() != 0 {
		t.Errorf("%s after %d messages sent; want definite_failure input_required, nothing sent", env, a.count())
	}
}

// oneQuestion is a server whose send_message asks "Send it?" once and
// sends when the round carries the answer and the state it gave. It
// honours an idempotency_key, and keeps a client_reference, which
// find_message looks up.
func oneQuestion(sent *atomic.Int64) *mcp.Server {
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	var drafts atomic.Int64
	var mu sync.Mutex
	byKey, byRef := map[string]string{}, map[string]bool{}
	type msgIn struct {
		To             string `json:"to"`
		Text           string `json:"text"`
		IdempotencyKey string `json:"idempotency_key,omitempty"`
		Reference      string `json:"client_reference,omitempty"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "send_message", Description: "Send a message, once the user confirms."},
		func(_ context.Context, req *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, map[string]string, error) {
			ok, _ := req.Params.InputResponses["confirm"].(*mcp.ElicitResult)
			if req.Params.RequestState == "" || ok == nil || ok.Action != "accept" {
				return &mcp.CallToolResult{RequestState: fmt.Sprintf("draft-%d", drafts.Add(1)), InputRequests: mcp.InputRequestMap{
					"confirm": &mcp.ElicitParams{Message: "Send it?", RequestedSchema: map[string]any{"type": "object"}}}}, nil, nil
			}
			mu.Lock()
			defer mu.Unlock()
			if n, done := byKey[in.IdempotencyKey]; done && in.IdempotencyKey != "" {
				return nil, map[string]string{"sent": in.Text, "n": n}, nil
			}
			n := fmt.Sprint(sent.Add(1))
			byKey[in.IdempotencyKey], byRef[in.Reference] = n, true
			return nil, map[string]string{"sent": in.Text, "n": n}, nil
		})
	type findIn struct {
		Reference string `json:"client_reference"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "find_message", Description: "Find a message by its client reference."},
		func(_ context.Context, _ *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, map[string]bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return nil, map[string]bool{"found": byRef[in.Reference]}, nil
		})
	return up
}

// oneQuestionTools are send_message's settings, by class.
var oneQuestionTools = map[string]string{
	"at_most_once": `"send_message": {"class": "at_most_once"}`,
	"keyed":        `"send_message": {"class": "keyed", "key_argument": "idempotency_key"}`,
	"reconcilable": `"send_message": {"class": "reconcilable", "ref_argument": "client_reference",
	  "check": {"tool": "find_message", "arguments": {"client_reference": "${ref}"},
	    "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
	  "find_message": {"class": "read_only"}`,
}

func oneQuestionConfig(class string) string {
	return `{"principal": "ana@example.com", "mcpServers": {"sender": {"command": "sender-mcp", "tools": {` + oneQuestionTools[class] + `}}}}`
}

// answeringClient is a client of the 2026-07-28 revision that declares
// elicitation and plays the rounds itself (the SDK's own loop is off).
func answeringClient(t *testing.T, g *mcpguard.Guard) *mcp.ClientSession {
	return answeringClientOn(t, g, context.Background())
}

// answeringClientOn is answeringClient with the guard's session connected
// on ctx (what the guard's Principal function may read).
func answeringClientOn(t *testing.T, g *mcpguard.Guard, ctx context.Context) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, fmt.Errorf("not asked this way")
		}}).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v < "2026-07-28" {
		t.Fatalf("the session speaks %s; want a revision that hands questions back", v)
	}
	return cs
}

func round(t *testing.T, cs *mcp.ClientSession, args map[string]any, state string, answers mcp.InputResponseMap) (*mcp.CallToolResult, envelope.Envelope) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_message", Arguments: args, RequestState: state, InputResponses: answers})
	if err != nil {
		t.Errorf("a round of send_message: %v", err)
		return &mcp.CallToolResult{}, envelope.Envelope{}
	}
	var env envelope.Envelope
	if raw, ok := res.Meta[mcptool.MetaEnvelope]; ok {
		b, _ := json.Marshal(raw)
		_ = json.Unmarshal(b, &env)
	}
	return res, env
}

// While the user's answer is outstanding the model repeats the call, many
// times at once, and the client sends the answer, many times at once (a
// resend, a retry): one message is sent, every answering round is that
// message (sent, or its replay), and a repeat without the answer is asked
// again or told the message was sent — never sent once more, never a
// failure that says nothing was done after it was.
func TestRelay_RepeatsAndAnswersInParallelSendOnce(t *testing.T) {
	for _, class := range []string{"at_most_once", "keyed", "reconcilable"} {
		t.Run(class, func(t *testing.T) {
			var sent atomic.Int64
			g := guardOver(t, oneQuestion(&sent), oneQuestionConfig(class), mcpguard.Options{})
			cs := answeringClient(t, g)
			args := map[string]any{"to": "#team", "text": "Lunch?"}
			first, env := round(t, cs, args, "", nil)
			if !first.NeedsInput() || first.RequestState == "" || env.Status != "" {
				t.Fatalf("the first round: needs input %v, state %q, envelope %q; want the server's question, relayed", first.NeedsInput(), first.RequestState, env.Status)
			}
			yes := mcp.InputResponseMap{"confirm": &mcp.ElicitResult{Action: "accept"}}
			var wg sync.WaitGroup
			var answered, repeated [8]*mcp.CallToolResult
			var answeredEnv, repeatedEnv [8]envelope.Envelope
			for i := range 8 {
				wg.Add(2)
				go func() {
					defer wg.Done()
					answered[i], answeredEnv[i] = round(t, cs, args, first.RequestState, yes)
				}()
				go func() {
					defer wg.Done()
					repeated[i], repeatedEnv[i] = round(t, cs, args, "", nil)
				}()
			}
			wg.Wait()
			if sent.Load() != 1 {
				t.Fatalf("%d messages sent; want one", sent.Load())
			}
			fresh := 0
			for i := range 8 {
				if e := answeredEnv[i]; e.Status != envelope.Success {
					t.Errorf("an answering round: %s (needs input %v); want the message, sent or replayed", e, answered[i].NeedsInput())
				} else if !e.Replayed {
					fresh++
				}
				if e := repeatedEnv[i]; !repeated[i].NeedsInput() && e.Status != envelope.Success {
					t.Errorf("a repeat without the answer: %s; want the question again, or the message's replay", e)
				}
			}
			if fresh != 1 {
				t.Errorf("%d answering rounds say they sent it; want one, the others replayed", fresh)
			}
		})
	}
}

// rewriting is a transport to a server whose answers pass through edit on
// their way to the guard, as a server not written with the Go SDK (which
// refuses to send such answers) may send them.
type rewriting struct {
	mcp.Transport
	edit func(result map[string]any)
}

func (r rewriting) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := r.Transport.Connect(ctx)
	return rewritingConn{c, r.edit}, err
}

type rewritingConn struct {
	mcp.Connection
	edit func(result map[string]any)
}

func (c rewritingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if res, ok := msg.(*jsonrpc.Response); ok && err == nil && len(res.Result) > 0 {
		var m map[string]any
		if json.Unmarshal(res.Result, &m) == nil {
			c.edit(m)
			res.Result, _ = json.Marshal(m)
		}
	}
	return msg, err
}

// A server that sends, then asks a follow-up ("Sent. Notify the team
// too?"), and says so: its input-required result carries content, which
// the protocol does not allow beside a request for input. Such an answer
// proves nothing of what the server did: the guard must not tell the model
// that nothing was done, nor give the key back for a repeat to send again.
func TestRelay_AQuestionBesideAResultIsNoProofThatNothingWasDone(t *testing.T) {
	var sent atomic.Int64
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "send_message", Description: "Send a message; then offer to notify the team."},
		func(_ context.Context, req *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, map[string]string, error) {
			if req.Params.RequestState == "" {
				sent.Add(1)
				return &mcp.CallToolResult{RequestState: "sent-1", InputRequests: mcp.InputRequestMap{
					"notify": &mcp.ElicitParams{Message: "Notify the team too?", RequestedSchema: map[string]any{"type": "object"}}}}, nil, nil
			}
			return nil, map[string]string{"sent": in.Text}, nil
		})
	cfg, err := mcpguard.ParseConfig([]byte(askerConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
	g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Logger: discard(),
		Transport: func(name string, s *mcpguard.Server) (mcp.Transport, error) {
			tr, err := serving(up)(name, s)
			return rewriting{tr, func(m map[string]any) {
				if m["resultType"] == "input_required" {
					m["content"] = []any{map[string]any{"type": "text", "text": "Sent."}}
				}
			}}, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	cs := connect(t, g) // a client that cannot answer
	for i := range 2 {
		_, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch?"}, nil)
		if env.Status == envelope.DefiniteFailure {
			t.Errorf("call %d: %s; the server said it sent it", i+1, env)
		}
	}
	if sent.Load() != 1 {
		t.Errorf("%d messages sent; want one", sent.Load())
	}
}

// A reconcilable tool whose check asks for input before it answers: the
// question is no answer (the guard relays none of a check's), so the
// action stays unknown — never found not applied and sent again, and the
// check's question is never handed to the client as the action's.
func TestRelay_ACheckThatAsksForInputSettlesNothing(t *testing.T) {
	var sent, checks atomic.Int64
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	type msgIn struct {
		Text      string `json:"text"`
		Reference string `json:"client_reference"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "send_message"}, func(_ context.Context, _ *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
		sent.Add(1)
		return nil, nil, fmt.Errorf("connection reset after sending") // the reply is lost
	})
	type findIn struct {
		Reference string `json:"client_reference"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "find_message"}, func(_ context.Context, _ *mcp.CallToolRequest, _ findIn) (*mcp.CallToolResult, any, error) {
		checks.Add(1)
		return &mcp.CallToolResult{RequestState: "who", InputRequests: mcp.InputRequestMap{
			"login": &mcp.ElicitParams{Message: "Sign in to search?", RequestedSchema: map[string]any{"type": "object"}}}}, nil, nil
	})
	cfg, err := mcpguard.ParseConfig([]byte(`{"principal": "ana@example.com", "mcpServers": {"sender": {"command": "sender-mcp", "tools": {
	  "send_message": {"class": "reconcilable", "ref_argument": "client_reference",
	    "check": {"tool": "find_message", "arguments": {"client_reference": "${ref}"},
	      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "absent": true}}},
	  "find_message": {"class": "read_only"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(map[string]any)
	}{
		{"as the Go SDK sends it", func(map[string]any) {}},
		// A server not written with the Go SDK may put an empty object
		// beside its question, in which /found is absent.
		{"with structured content beside it", func(m map[string]any) {
			if m["resultType"] == "input_required" {
				m["structuredContent"] = map[string]any{}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sent.Store(0)
			checks.Store(0)
			cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
			// A clock on which every reading is an hour later: no attempt
			// is in flight by the time of a check, so a not-applied counts.
			var hours atomic.Int64
			start := time.Now()
			g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Logger: discard(),
				Transport: func(name string, s *mcpguard.Server) (mcp.Transport, error) {
					tr, err := serving(up)(name, s)
					return rewriting{tr, c.edit}, err
				},
				Tune: func(_ string, o *agenttool.Options) {
					o.Now = func() time.Time { return start.Add(time.Duration(hours.Add(1)) * time.Hour) }
				}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			cs := answeringClient(t, g)
			for i := range 3 {
				res, env := round(t, cs, map[string]any{"text": "Lunch?"}, "", nil)
				if res.NeedsInput() || env.Status != envelope.UnknownOutcome {
					t.Errorf("call %d: %s (needs input %v); want unknown_outcome, and no question", i+1, env, res.NeedsInput())
				}
			}
			if sent.Load() != 1 || checks.Load() == 0 {
				t.Errorf("%d messages sent after %d checks; want one, checked", sent.Load(), checks.Load())
			}
		})
	}
}

// A question the client did not declare it can answer — a URL to open,
// asked of a client that takes forms only — is not relayed: the client
// is told, in the envelope, what the server asked and that nothing was
// done, rather than a protocol error that says neither.
func TestRelay_AQuestionTheClientCannotTakeIsToldNotRelayed(t *testing.T) {
	var sent atomic.Int64
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "send_message"}, func(_ context.Context, req *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, any, error) {
		if req.Params.RequestState == "" {
			return &mcp.CallToolResult{RequestState: "s", InputRequests: mcp.InputRequestMap{"login": &mcp.ElicitParams{
				Mode: "url", Message: "Sign in to send", URL: "https://sender.example/login", ElicitationID: "e-1"}}}, nil, nil
		}
		sent.Add(1)
		return nil, map[string]string{"sent": in.Text}, nil
	})
	g := guardOver(t, up, askerConfig, mcpguard.Options{})
	for _, version := range []string{"2025-11-25", ""} {
		t.Run("revision "+version, func(t *testing.T) {
			ct, st := mcp.NewInMemoryTransports()
			if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
				t.Fatal(err)
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					return &mcp.ElicitResult{Action: "accept"}, nil
				}}).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close() })
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_message", Arguments: map[string]any{"to": "#team", "text": "Lunch?"}})
			if err != nil {
				t.Fatalf("the call failed with no envelope: %v; want definite_failure input_required, naming the question", err)
			}
			_, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch?"}, nil)
			if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != mcptool.CodeInputRequired || sent.Load() != 0 || !res.IsError {
				t.Errorf("%s (isError %v), %d sent; want definite_failure input_required, nothing sent", env, res.IsError, sent.Load())
			}
		})
	}
}

// A server that asks the user before it acts (a multi-round-trip result,
// SEP-2322) has done nothing: the guard gives the action's key back and
// relays the question to its client, and the client's answer, in the next
// round of the same call, reaches the server under the same action — sent
// once, replayed after, whichever revision the client speaks. A client that
// cannot answer is told what the server asked; nothing is held.
func TestGuard_AServerThatAsksForInputAsksTheClient(t *testing.T) {
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	var sent atomic.Int64
	mcp.AddTool(up, &mcp.Tool{Name: "send_message", Description: "Send a message, once the user confirms."},
		func(_ context.Context, req *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, map[string]string, error) {
			if len(req.Params.InputResponses) == 0 {
				return &mcp.CallToolResult{RequestState: "draft-1", InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{Message: "Send it?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}}}}, nil, nil
			}
			answer, ok := req.Params.InputResponses["confirm"].(*mcp.ElicitResult)
			if req.Params.RequestState != "draft-1" || !ok || answer.Action != "accept" {
				return nil, nil, fmt.Errorf("not sent: state %q, answer %+v", req.Params.RequestState, req.Params.InputResponses["confirm"])
			}
			sent.Add(1)
			return nil, map[string]string{"sent": in.Text}, nil
		})
	mcp.AddTool(up, &mcp.Tool{Name: "balance", Description: "An account's balance; asks which account."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]string, error) {
			if len(req.Params.InputResponses) == 0 {
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"account": &mcp.ElicitParams{Message: "Which account?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}}}}, nil, nil
			}
			return nil, map[string]string{"balance": "12.50"}, nil
		})
	g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"sender": {"command": "sender-mcp",
	  "tools": {"send_message": {"class": "at_most_once"}, "balance": {"class": "read_only"}}}}}`, mcpguard.Options{})
	front := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.Server() }, nil))
	t.Cleanup(front.Close)
	client := func(t *testing.T, overHTTP bool, version string, asked *atomic.Int64) *mcp.ClientSession {
		var ct mcp.Transport = &mcp.StreamableClientTransport{Endpoint: front.URL}
		if !overHTTP {
			var st mcp.Transport
			ct, st = mcp.NewInMemoryTransports()
			if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
				t.Fatal(err)
			}
		}
		var opts mcp.ClientOptions
		if asked != nil {
			opts.ElicitationHandler = func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked.Add(1)
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
			}
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &opts).Connect(context.Background(), ct,
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	for _, c := range []struct {
		name     string
		overHTTP bool
		version  string
	}{
		{"a client that answers", false, ""},
		{"a client of the revision before", false, "2025-11-25"},
		{"a client that answers over HTTP", true, ""},
		{"a client of the revision before over HTTP", true, "2025-11-25"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var asked atomic.Int64
			cs := client(t, c.overHTTP, c.version, &asked)
			if v := cs.InitializeResult().ProtocolVersion; c.version != "" && v != c.version {
				t.Fatalf("the session speaks %s; want %s", v, c.version)
			}
			before := sent.Load()
			for i := range 2 {
				res, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch? (" + c.name + ")"}, nil)
				if env.Status != envelope.Success || env.Replayed != (i == 1) || !strings.Contains(resultText(res), c.name) {
					t.Errorf("call %d: %s (%s); want success, its replay after", i+1, env, resultText(res))
				}
			}
			if sent.Load()-before != 1 || asked.Load() != 1 {
				t.Errorf("%d messages sent, the user asked %d times; want one of each", sent.Load()-before, asked.Load())
			}
			// A read-only tool's question passes as its answers do.
			if res, _ := call(t, cs, "balance", map[string]any{}, nil); res.IsError || !strings.Contains(resultText(res), "12.50") || asked.Load() != 2 {
				t.Errorf("a read-only tool that asks first: %s (isError %v), the user asked %d times; want its answer, asked once more", resultText(res), res.IsError, asked.Load())
			}
		})
	}
	t.Run("a client that cannot answer", func(t *testing.T) {
		cs := client(t, false, "", nil)
		before := sent.Load()
		for _, text := range []string{"Lunch at three?", "Lunch at four?"} {
			_, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": text}, nil)
			if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != mcptool.CodeInputRequired ||
				env.Next != envelope.AskHuman || !strings.Contains(env.Error.Message, "Send it?") {
				t.Errorf("a call its server answers with a question: %s; want definite_failure input_required naming the question (and no fence held)", env)
			}
		}
		if sent.Load() != before {
			t.Errorf("%d messages sent; want none", sent.Load()-before)
		}
	})
}

// I6 through the relay: the server sees one caller, the guard, for every
// user behind it, and cannot bind its requestState to any of them. The
// guard hands the client the server's state sealed to the action it was
// asked for; a later round carrying another user's state, or this user's
// state for another action (reworded), or a state from before a restart,
// goes to the server as a first round — it asks again, and sends nothing
// on answers given to another question.
func TestRelay_AnAnswerReachesOnlyTheActionItWasAskedFor(t *testing.T) {
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	var mu sync.Mutex
	var sent []string
	mcp.AddTool(up, &mcp.Tool{Name: "send_message", Description: "Send a message, once the user confirms."},
		func(_ context.Context, req *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, map[string]string, error) {
			if req.Params.RequestState != "confirm:"+in.To {
				// Unsigned state, as a server behind one caller may keep it.
				return &mcp.CallToolResult{RequestState: "confirm:" + in.To, InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{
					Message: "Send it?", RequestedSchema: map[string]any{"type": "object"}}}}, nil, nil
			}
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, in.To+": "+in.Text)
			return nil, map[string]string{"sent": in.Text}, nil
		})
	type userKey struct{}
	g := guardOver(t, up, askerConfig, mcpguard.Options{Principal: func(ctx context.Context, _ mcptool.Caller) (string, error) {
		return ctx.Value(userKey{}).(string), nil // who connected: the session's context
	}})
	as := func(user string) *mcp.ClientSession {
		return answeringClientOn(t, g, context.WithValue(context.Background(), userKey{}, user))
	}
	ana, bob := as("ana@example.com"), as("bob@example.com")
	yes := mcp.InputResponseMap{"confirm": &mcp.ElicitResult{Action: "accept"}}
	msg := map[string]any{"to": "#payroll", "text": "Pay the bonus."}
	asked, _ := round(t, ana, msg, "", nil)
	if !asked.NeedsInput() || asked.RequestState == "" {
		t.Fatalf("ana's first round: %+v; want the server's question", asked)
	}
	for _, c := range []struct {
		name  string
		cs    *mcp.ClientSession
		args  map[string]any
		state string
	}{
		{"bob, with ana's state", bob, msg, asked.RequestState},
		{"ana, reworded", ana, map[string]any{"to": "#payroll", "text": "Pay the bonus twice."}, asked.RequestState},
		{"ana, with the server's bare state", ana, msg, "confirm:#payroll"},
	} {
		if res, _ := round(t, c.cs, c.args, c.state, yes); !res.NeedsInput() || len(sent) != 0 {
			t.Errorf("%s: %+v, sent %q; want the question asked again, nothing sent", c.name, res, sent)
		}
	}
	res, _ := round(t, ana, msg, asked.RequestState, yes)
	if res.NeedsInput() || res.IsError || len(sent) != 1 {
		t.Errorf("ana's own answer: %+v, sent %q; want it sent once", res, sent)
	}
}

// askingDuring is a server of the revision before 2026-07-28 whose
// send_message asks the user "Send it?" during the call
// (elicitation/create), and sends only if the user accepts. If fallsBack,
// it asks only a client that declared elicitation, and sends without
// asking otherwise, as many servers fall back.
func askingDuring(sent *atomic.Int64, fallsBack bool) *mcp.Server {
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	yes := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"ok": {Type: "boolean"}}}
	mcp.AddTool(up, &mcp.Tool{Name: "send_message", Description: "Send a message, once the user confirms."},
		func(ctx context.Context, req *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, map[string]string, error) {
			p := req.Session.InitializeParams()
			if !fallsBack || (p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil) {
				res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Send " + in.Text + "?", RequestedSchema: yes})
				if err != nil {
					return nil, nil, fmt.Errorf("could not ask the user: %w", err)
				}
				if ok, _ := res.Content["ok"].(bool); res.Action != "accept" || !ok {
					return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the user said no; nothing sent"}}}, nil, nil
				}
			}
			sent.Add(1)
			return nil, map[string]string{"sent": in.Text}, nil
		})
	return up
}

// frontClient connects a client of the protocol revision version to the
// guard's front, which answers a question with answer and records it.
func frontClient(t *testing.T, g *mcpguard.Guard, version string, asked *[]string, answer bool) *mcp.ClientSession {
	t.Helper()
	var mu sync.Mutex
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			*asked = append(*asked, req.Params.Message)
			mu.Unlock()
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": answer}}, nil
		}}).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// A server of the revision before 2026-07-28 asks its question during
// the call (elicitation/create), and the server sees one caller, the
// guard. While the guard's front has had one client — a desktop client
// over stdio — the call is that client's, and the question goes to it:
// its answer comes back, and the action is done once, or not at all.
func TestGuard_AServerThatAsksDuringTheCallAsksTheOneClient(t *testing.T) {
	var sent atomic.Int64
	g := guardOver(t, askingDuring(&sent, false), askerConfig, mcpguard.Options{})
	var asked []string
	cs := frontClient(t, g, "2025-11-25", &asked, true)
	_, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch?"}, nil)
	if env.Status != envelope.Success || sent.Load() != 1 || len(asked) != 1 || asked[0] != "Send Lunch??" {
		t.Fatalf("a call whose server asks during it: %s, %d sent, the client asked %q; want success, one sent, the server's question asked", env, sent.Load(), asked)
	}
	if _, again := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch?"}, nil); !again.Replayed || sent.Load() != 1 || len(asked) != 1 {
		t.Errorf("the same call again: %s, %d sent, %d questions; want it replayed, nothing asked or sent", again, sent.Load(), len(asked))
	}
}

// Once a second client has sent the front a request (its initialize
// alone is one), a question asked during a call cannot be told to be the
// first's or the second's — two users, over HTTP — and goes to neither: the server is told it cannot be
// asked, and the call answers as the server does. Nor does a client of
// the 2026-07-28 revision get a question during a call (the revision
// has none: a server asks it by answering the call). Nothing is sent.
func TestGuard_AQuestionDuringACallGoesToNoClientItMayNotBeFor(t *testing.T) {
	for _, c := range []struct {
		name         string
		version      string
		second, list bool
	}{
		{"a second client", "2025-11-25", true, true},
		{"a second client, only connected", "2025-11-25", true, false},
		{"a client of the 2026-07-28 revision", "2026-07-28", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sent atomic.Int64
			g := guardOver(t, askingDuring(&sent, false), askerConfig, mcpguard.Options{})
			var asked, askedOther []string
			cs := frontClient(t, g, c.version, &asked, true)
			if c.second {
				other := frontClient(t, g, c.version, &askedOther, true)
				if c.list {
					if _, err := other.ListTools(context.Background(), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			_, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch?"}, nil)
			t.Logf("the call: %s", env)
			if env.Status == envelope.Success || sent.Load() != 0 || len(asked)+len(askedOther) != 0 {
				t.Errorf("a question during a call, %s: %s, %d sent, questions %q and %q; want none asked, nothing sent, no success", c.name, env, sent.Load(), asked, askedOther)
			}
		})
	}
}

// askingCheck is a server of the revision before 2026-07-28 whose
// book_seat fails its first call (an error after it was sent: unknown)
// and books nothing, and whose read-only check find_booking asks the user
// during its call whether the booking was made — and answers found with
// the user's word.
func askingCheck(booked *atomic.Int64, checks *atomic.Int64) *mcp.Server {
	up := mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	type bookIn struct {
		Passenger string `json:"passenger"`
		Flight    string `json:"flight"`
		Ref       string `json:"client_reference,omitempty"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "book_seat", Description: "Book a seat."},
		func(context.Context, *mcp.CallToolRequest, bookIn) (*mcp.CallToolResult, map[string]string, error) {
			return nil, nil, fmt.Errorf("the booking system timed out")
		})
	type findIn struct {
		Ref string `json:"client_reference"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "find_booking", Description: "Find a booking by its client reference.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, map[string]bool, error) {
			checks.Add(1)
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Was " + in.Ref + " booked?",
				RequestedSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"ok": {Type: "boolean"}}}})
			if err != nil {
				return nil, nil, err
			}
			ok, _ := res.Content["ok"].(bool)
			return nil, map[string]bool{"found": res.Action == "accept" && ok}, nil
		})
	return up
}

// A reconcilable tool's check asks the server what became of the action:
// a fact of the server, never the user's word. A check that asks during
// its call (elicitation/create) is not passed to the client — as a
// check's question in a multi-round-trip result is not — and proves
// nothing: the action stays unknown, and is never told success on the
// user's answer while nothing was booked.
func TestGuard_ACheckThatAsksDuringItsCallAsksNoClient(t *testing.T) {
	var booked, checks atomic.Int64
	g := guardOver(t, askingCheck(&booked, &checks), `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp",
  "tools": {"book_seat": {"class": "reconcilable", "ref_argument": "client_reference",
    "check": {"tool": "find_booking", "arguments": {"client_reference": "${ref}"}, "applied": {"pointer": "/found", "equals": true},
      "not_applied": {"pointer": "/found", "equals": false}}},
    "find_booking": {"class": "read_only"}}}}}`, mcpguard.Options{})
	var asked []string
	cs := frontClient(t, g, "2025-11-25", &asked, true)
	args := map[string]any{"passenger": "Ana Lima", "flight": "TP1234"}
	for i := range 2 { // the call, and the same call again
		_, env := call(t, cs, "book_seat", args, nil)
		if len(asked) != 0 || env.Status == envelope.Success {
			t.Fatalf("a check that asks, call %d: the client was asked %q, the call answered %s with %d booked; want no question, no success",
				i+1, asked, env, booked.Load())
		}
	}
	if checks.Load() == 0 {
		t.Fatal("the check never ran")
	}
}

// A server that falls back when its client cannot be asked (here, it
// sends without asking) did so behind a guard of several users before
// the guard passed questions on, and still does: a guard whose
// configuration names several users (bearer tokens, OAuth) can pass no
// question on, and tells its servers so when it connects — it declares
// no elicitation — rather than declaring it and failing every question,
// each such call turning into an error read as unknown, the user fenced.
func TestGuard_AServerThatFallsBackWhenNoClientCanBeAskedStillDoes(t *testing.T) {
	var sent atomic.Int64
	up := askingDuring(&sent, true)
	cfg, err := mcpguard.ParseConfig([]byte(`{
	  "tokens": {"ana@example.com": "ana-token", "bob@example.com": "bob-token"},
	  "mcpServers": {"sender": {"command": "sender-mcp", "tools": {"send_message": {"class": "at_most_once"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	front := tokenFront(t, cfg, up)
	var asked atomic.Int64
	as := func(token string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked.Add(1)
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
			}}).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: front, HTTPClient: &http.Client{Transport: bearerTransport(token)}},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	ana := as("ana-token")
	as("bob-token")
	_, env := call(t, ana, "send_message", map[string]any{"to": "#team", "text": "Lunch?"}, nil)
	if env.Status != envelope.Success || sent.Load() != 1 || asked.Load() != 0 {
		t.Errorf("ana's call, bob connected too: %s, %d sent, %d questions; want success, sent once without a question, as before the guard passed questions on",
			env, sent.Load(), asked.Load())
	}
}

// slowToForgetConfig guards slowToForget's send_message as reconcilable,
// with a short attempt and late window, and passes its read-only tools
// through.
const slowToForgetConfig = `{"principal": "ana@example.com", "mcpServers": {"sender": {"command": "sender-mcp",
  "tools": {"send_message": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "300ms", "listen_late": "100ms",
    "check": {"tool": "find_message", "arguments": {"client_reference": "${ref}"}, "applied": {"pointer": "/found", "equals": true},
      "not_applied": {"pointer": "/found", "equals": false}}},
    "find_message": {"class": "read_only"}, "slow_search": {"class": "read_only"}}}}}`

// slowToForget is a server of the revision before 2026-07-28 whose
// send_message asks the user "Send it?" during the call and sends, under
// the client reference, once the user accepts — and goes on waiting for
// the answer when its call is cancelled, as a server that does not pass
// a cancellation on to its question does. Its first call stalls for
// hiccup before it asks (none: 0). find_message, read-only, says whether
// a message went under a reference. Each call of send_message sends on
// ended as it ends.
func slowToForget(sent *atomic.Int64, ended chan<- struct{}, hiccup time.Duration) *mcp.Server {
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	var mu sync.Mutex
	refs := map[string]bool{}
	var calls atomic.Int64
	type sendRefIn struct {
		To   string `json:"to"`
		Text string `json:"text"`
		Ref  string `json:"client_reference,omitempty"`
	}
	yes := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"ok": {Type: "boolean"}}}
	mcp.AddTool(up, &mcp.Tool{Name: "send_message", Description: "Send a message, once the user confirms."},
		func(ctx context.Context, req *mcp.CallToolRequest, in sendRefIn) (*mcp.CallToolResult, map[string]string, error) {
			defer func() { ended <- struct{}{} }()
			message := "Send " + in.Text + "?"
			if calls.Add(1) == 1 && hiccup > 0 {
				time.Sleep(hiccup)
				message += " (sorry for the wait)"
			}
			res, err := req.Session.Elicit(context.WithoutCancel(ctx), &mcp.ElicitParams{Message: message, RequestedSchema: yes})
			if err != nil {
				return nil, nil, fmt.Errorf("could not ask the user: %w", err)
			}
			if ok, _ := res.Content["ok"].(bool); res.Action != "accept" || !ok {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the user said no; nothing sent"}}}, nil, nil
			}
			mu.Lock()
			refs[in.Ref] = true
			mu.Unlock()
			sent.Add(1)
			return nil, map[string]string{"sent": in.Text}, nil
		})
	type findIn struct {
		Ref string `json:"client_reference"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "find_message", Description: "Find a message by its client reference.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, map[string]bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return nil, map[string]bool{"found": refs[in.Ref]}, nil
		})
	return up
}

// lateAnswerer connects a client of the 2025-11-25 revision to g's front
// that holds each question held says until late is closed, then accepts
// it, saying on open whether the question was still open at the client;
// any other question it accepts at once.
func lateAnswerer(t *testing.T, g *mcpguard.Guard, held func(*mcp.ElicitRequest) bool, late <-chan struct{}, open chan<- bool) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if held(req) {
				<-late
				open <- ctx.Err() == nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		}}).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// retryUntilSent calls send_message with args, as a model does after
// unknown_outcome, until the check may read the action as not applied
// and the guard sends it again (asking again), and wants it sent once.
func retryUntilSent(t *testing.T, cs *mcp.ClientSession, args map[string]any, sent *atomic.Int64) {
	t.Helper()
	var env envelope.Envelope
	for i := 0; i < 60 && env.Status != envelope.Success; i++ {
		time.Sleep(50 * time.Millisecond)
		_, env = call(t, cs, "send_message", args, nil)
	}
	if env.Status != envelope.Success || sent.Load() != 1 {
		t.Fatalf("the call again, once the check could read it: %s, %d sent; want success, sent once", env, sent.Load())
	}
}

// waitEnded waits for n calls of the server to end.
func waitEnded(t *testing.T, ended <-chan struct{}, n int) {
	t.Helper()
	for range n {
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("a call of the server never ended")
		}
	}
}

// A question a server asks during a call lives no longer than the call:
// once the guard gives up on the call (its attempt timeout and late
// window passed), the question is withdrawn from the client, and the
// server is told it cannot be asked. Else a user's late "yes" reaches a
// server that acts on it after the guard stopped listening — after the
// check read the action as not applied and the model's retry sent it,
// asking again: the message went twice.
func TestGuard_AQuestionLivesNoLongerThanItsCall(t *testing.T) {
	var sent atomic.Int64
	ended := make(chan struct{}, 4)
	g := guardOver(t, withSlowSearch(slowToForget(&sent, ended, 0), nil, nil), slowToForgetConfig, mcpguard.Options{})
	// The user answers the first question late, whatever became of it;
	// any later one at once.
	late, open := make(chan struct{}), make(chan bool, 1)
	var questions atomic.Int64
	cs := lateAnswerer(t, g, func(*mcp.ElicitRequest) bool { return questions.Add(1) == 1 }, late, open)

	args := map[string]any{"to": "#team", "text": "Lunch?"}
	_, first := call(t, cs, "send_message", args, nil)
	if first.Status != envelope.UnknownOutcome {
		t.Fatalf("a call whose question outlived its attempt: %s; want unknown_outcome", first)
	}
	// The model calls again until the check may read the action as not
	// applied and the guard sends it again, asking again.
	retryUntilSent(t, cs, args, &sent)
	close(late) // the user answers the first question at last
	if <-open {
		t.Error("the first question was still open at the client after its call ended; want it withdrawn")
	}
	waitEnded(t, ended, 2) // both calls of send_message have ended at the server
	if n := sent.Load(); n != 1 {
		t.Errorf("after the user's late answer to the first question: %d sent; want 1", n)
	}
}

// withSlowSearch adds to up a read-only tool, slow_search, that runs
// until release is closed (or its call is cancelled), and says on running
// when each call of it has begun.
func withSlowSearch(up *mcp.Server, running chan<- struct{}, release <-chan struct{}) *mcp.Server {
	type searchIn struct {
		Query string `json:"query"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "slow_search", Description: "Search the archive; slow.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in searchIn) (*mcp.CallToolResult, map[string]string, error) {
			running <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, map[string]string{"found": "nothing for " + in.Query}, nil
		})
	return up
}

// A question the server asks during a call cannot be told apart from a
// question for any other call of the guard's running at the same server
// then: a slow read-only call the model made in parallel, say. Once the
// guard gives up on one of those calls (its attempt timeout and late
// window passed), the question may be that call's, and must not reach the
// server any more: else the user's late "yes" reaches a server that acts
// on it after the check read the action as not applied and a retry sent
// it again — two messages, while the parallel call merely still ran.
func TestGuard_AQuestionIsWithdrawnOnceACallItMayBeForIsGivenUp(t *testing.T) {
	var sent atomic.Int64
	ended := make(chan struct{}, 4)
	running, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	g := guardOver(t, withSlowSearch(slowToForget(&sent, ended, 0), running, release), slowToForgetConfig, mcpguard.Options{})
	late, open := make(chan struct{}), make(chan bool, 1)
	var questions atomic.Int64
	cs := lateAnswerer(t, g, func(*mcp.ElicitRequest) bool { return questions.Add(1) == 1 }, late, open)

	// The model searches, slowly, and meanwhile sends a message.
	searched := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow_search", Arguments: map[string]any{"query": "lunch"}})
		searched <- err
	}()
	<-running
	args := map[string]any{"to": "#team", "text": "Lunch?"}
	_, first := call(t, cs, "send_message", args, nil)
	if first.Status != envelope.UnknownOutcome {
		t.Fatalf("a call whose question outlived its attempt: %s; want unknown_outcome", first)
	}
	retryUntilSent(t, cs, args, &sent)
	close(late) // the user answers the first question, the search still running
	if <-open {
		t.Error("the first question was still open at the client after the guard gave up on its call; want it withdrawn")
	}
	waitEnded(t, ended, 2) // both calls of send_message have ended at the server
	if n := sent.Load(); n != 1 {
		t.Errorf("after the user's late answer to the first question, a search still running: %d sent; want 1", n)
	}
}

// A server that stalls past the guard's attempt timeout and late window,
// and only then asks its question, asks it for a call the guard gave up
// on; if another call of the guard's runs at the server then (a slow
// read-only call the model made in parallel), the guard cannot tell the
// question is not that one's. The guard's check trusts a not-applied
// answer only once the given-up attempt can no longer land (ClockSkew
// after the late window); a question the guard passed on in that time
// and the user answered later makes the server land it later still —
// after the check read it as not applied and a retry sent it: two
// messages.
func TestGuard_AQuestionAskedJustAfterACallWasGivenUpIsNotPassedOn(t *testing.T) {
	var sent atomic.Int64
	ended := make(chan struct{}, 4)
	running, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	g := guardOver(t, withSlowSearch(slowToForget(&sent, ended, 600*time.Millisecond), running, release), slowToForgetConfig, mcpguard.Options{})
	late, open := make(chan struct{}), make(chan bool, 1)
	cs := lateAnswerer(t, g, func(req *mcp.ElicitRequest) bool {
		return strings.HasSuffix(req.Params.Message, "(sorry for the wait)")
	}, late, open)

	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow_search", Arguments: map[string]any{"query": "lunch"}})
	<-running
	args := map[string]any{"to": "#team", "text": "Lunch?"}
	_, first := call(t, cs, "send_message", args, nil)
	if first.Status != envelope.UnknownOutcome {
		t.Fatalf("a call whose server stalled past its attempt: %s; want unknown_outcome", first)
	}
	retryUntilSent(t, cs, args, &sent)
	close(late)            // the user answers the stalled call's question, if it was asked
	waitEnded(t, ended, 2) // both calls of send_message have ended at the server
	select {
	case open := <-open:
		if open {
			t.Error("the question of a call the guard had given up on was open at the client when the user answered it")
		}
	default: // never passed on
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("after the user's answer to the stalled call's question: %d sent; want 1", n)
	}
}

// keyedAsker is a server of the revision before 2026-07-28 whose
// send_message asks "Send it?" during the call, goes on waiting for the
// answer when its call is cancelled, and sends once per idempotency key:
// a repeat of a key answers what it sent.
func keyedAsker(sent *atomic.Int64) *mcp.Server {
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	var mu sync.Mutex
	byKey := map[string]bool{}
	type keyedIn struct {
		To   string `json:"to"`
		Text string `json:"text"`
		Key  string `json:"idempotency_key,omitempty"`
	}
	yes := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"ok": {Type: "boolean"}}}
	mcp.AddTool(up, &mcp.Tool{Name: "send_message", Description: "Send a message, once the user confirms."},
		func(ctx context.Context, req *mcp.CallToolRequest, in keyedIn) (*mcp.CallToolResult, map[string]string, error) {
			res, err := req.Session.Elicit(context.WithoutCancel(ctx), &mcp.ElicitParams{Message: "Send " + in.Text + "?", RequestedSchema: yes})
			if err != nil {
				return nil, nil, fmt.Errorf("could not ask the user: %w", err)
			}
			if ok, _ := res.Content["ok"].(bool); res.Action != "accept" || !ok {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the user said no; nothing sent"}}}, nil, nil
			}
			mu.Lock()
			defer mu.Unlock()
			if !byKey[in.Key] {
				byKey[in.Key] = true
				sent.Add(1)
			}
			return nil, map[string]string{"sent": in.Text}, nil
		})
	return up
}

// A keyed tool resends an attempt that timed out under the same key, while
// the guard still listens late for the first: the server asks again for
// the resend. A late answer to either question is safe — the server sends
// once per key — so the resend's question lives as long as the resend,
// not only as long as the first attempt: the user who answers it after
// the guard gave up on the first attempt has the message sent, once.
func TestGuard_AKeyedResendsQuestionOutlivesTheFirstAttempt(t *testing.T) {
	var sent atomic.Int64
	g := guardOver(t, keyedAsker(&sent), `{"principal": "ana@example.com", "mcpServers": {"sender": {"command": "sender-mcp",
  "tools": {"send_message": {"class": "keyed", "key_argument": "idempotency_key", "attempt_timeout": "1s", "listen_late": "500ms"}}}}}`, mcpguard.Options{})
	late := make(chan struct{})
	defer close(late)
	var questions atomic.Int64
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if questions.Add(1) == 1 {
				<-late // the user misses the first question
			} else {
				time.Sleep(700 * time.Millisecond) // and takes a while over the second
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		}}).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	_, env := call(t, cs, "send_message", map[string]any{"to": "#team", "text": "Lunch?"}, nil)
	if env.Status != envelope.Success || sent.Load() != 1 {
		t.Errorf("a keyed call resent after its first attempt's question went unanswered: %s, %d sent; want success, sent once", env, sent.Load())
	}
}
