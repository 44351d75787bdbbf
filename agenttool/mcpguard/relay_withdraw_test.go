package mcpguard_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/envelope"
)

// slowToForgetConfig guards slowToForget's send_message as reconcilable,
// with a short attempt and late window, and passes its read-only tools
// through.
const slowToForgetConfig = `{"principal": "ana@example.com", "mcpServers": {"sender": {"command": "sender-mcp",
  "tools": {"send_message": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "300ms", "listen_late": "100ms",
    "check": {"tool": "find_message", "arguments": {"client_reference": "${ref}"}, "applied": {"pointer": "/found", "equals": true},
      "not_applied": {"pointer": "/found", "equals": false}}},
    "find_message": {"class": "read_only"}, "slow_search": {"class": "read_only"}}}}}`

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
	g := guardOver(t, withSlowSearch(slowToForget(&sent, ended), running, release), slowToForgetConfig, mcpguard.Options{})
	late := make(chan struct{})
	var questions atomic.Int64
	withdrawn := make(chan bool, 1)
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if questions.Add(1) == 1 {
				<-late
				withdrawn <- ctx.Err() != nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		}}).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })

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
	var env envelope.Envelope
	for i := 0; i < 60 && env.Status != envelope.Success; i++ {
		time.Sleep(50 * time.Millisecond)
		_, env = call(t, cs, "send_message", args, nil)
	}
	if env.Status != envelope.Success || sent.Load() != 1 {
		t.Fatalf("the call again, once the check could read it: %s, %d sent; want success, sent once", env, sent.Load())
	}
	close(late) // the user answers the first question, the search still running
	if !<-withdrawn {
		t.Error("the first question was still open at the client after the guard gave up on its call; want it withdrawn")
	}
	for range 2 { // both calls of send_message have ended at the server
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("the server's first call never ended")
		}
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("after the user's late answer to the first question, a search still running: %d sent; want 1", n)
	}
}

// hiccupping is slowToForget whose first call of send_message stalls for
// hiccup before it asks "Send it?" — past the guard's attempt timeout and
// late window — and, like slowToForget, goes on regardless of its call's
// cancellation.
func hiccupping(sent *atomic.Int64, ended chan<- struct{}, hiccup time.Duration) *mcp.Server {
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
			if calls.Add(1) == 1 {
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
	g := guardOver(t, withSlowSearch(hiccupping(&sent, ended, 600*time.Millisecond), running, release), slowToForgetConfig, mcpguard.Options{})
	late := make(chan struct{})
	answered := make(chan bool, 1)
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if strings.HasSuffix(req.Params.Message, "(sorry for the wait)") {
				<-late
				answered <- ctx.Err() == nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		}}).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })

	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow_search", Arguments: map[string]any{"query": "lunch"}})
	<-running
	args := map[string]any{"to": "#team", "text": "Lunch?"}
	_, first := call(t, cs, "send_message", args, nil)
	if first.Status != envelope.UnknownOutcome {
		t.Fatalf("a call whose server stalled past its attempt: %s; want unknown_outcome", first)
	}
	var env envelope.Envelope
	for i := 0; i < 60 && env.Status != envelope.Success; i++ {
		time.Sleep(50 * time.Millisecond)
		_, env = call(t, cs, "send_message", args, nil)
	}
	if env.Status != envelope.Success || sent.Load() != 1 {
		t.Fatalf("the call again, once the check could read it: %s, %d sent; want success, sent once", env, sent.Load())
	}
	close(late)   // the user answers the stalled call's question, if it was asked
	for range 2 { // both calls of send_message have ended at the server
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("the server's first call never ended")
		}
	}
	select {
	case open := <-answered:
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
