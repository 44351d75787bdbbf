package mcpguard_test

// At most one effect per action at a third party's server behind the
// guard, and answers that tell the truth, when the server answers as it
// shuts down, copies race across sessions, and the client cancels. (From
// a fresh-context review of the guard.)

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/mcpfault"
)

// countingSender is a third party's MCP server with one effectful tool,
// send, that counts what it sends. Its handler runs onSend after the
// message is sent (the effect is applied): an error it returns is the
// call's answer.
type countingSender struct {
	sent   atomic.Int64
	onSend func(n int64) error
}

func (s *countingSender) server() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "send", Description: "Send a message."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, map[string]string, error) {
			n := s.sent.Add(1)
			if s.onSend != nil {
				if err := s.onSend(n); err != nil {
					return nil, nil, err
				}
			}
			return nil, map[string]string{"sent": in.To}, nil
		})
	return srv
}

const senderConfig = `{
  "principal": "ana@example.com",
  "mcpServers": {
    "sender": {
      "command": "sender-mcp",
      "tools": {"send": {"class": "at_most_once", "identifying": ["to", "text"]}}
    }
  }
}`

// A server that is shutting down sends the message, answers the call
// "server is closing" (-32004), and its process ends. The call was sent
// and acted on: an at_most_once tool must answer unknown_outcome and never
// send it again. mcptool reads ErrConnectionClosed as "not sent" when a
// ping on the session then fails — which it did here because the server
// ended after answering, not before the call was written. (Found by a
// fresh-context review: the message went twice, answered success. The
// guard's sessions are watched by mcptool.WatchWrites since.)
func TestOneEffect_AClosingAnswerFollowedByTheServersEndIsUnknown(t *testing.T) {
	s := &countingSender{}
	s.onSend = func(n int64) error {
		if n == 1 {
			return &jsonrpc.Error{Code: -32004, Message: "server is closing"}
		}
		return nil
	}
	up := s.server()
	tr := func(string, *mcpguard.Server) (mcp.Transport, error) {
		ct, st := mcp.NewInMemoryTransports()
		if _, err := up.Connect(context.Background(), st, nil); err != nil {
			return nil, err
		}
		return mcpfault.EndsAfterClosingAnswer(ct), nil
	}
	g := guardOver(t, nil, senderConfig, mcpguard.Options{Transport: tr})
	cs := connect(t, g)
	msg := map[string]any{"to": "bob@example.com", "text": "the contract is signed"}
	res, env := call(t, cs, "send", msg, nil)
	t.Logf("first call: isError=%v %s", res.IsError, env)
	_, again := call(t, cs, "send", msg, nil)
	t.Logf("the model's retry: %s", again)
	if n := s.sent.Load(); n != 1 {
		t.Errorf("the server sent the message %d times for one logical action (at_most_once); envelopes: %s, then %s", n, env, again)
	}
	if env.Status == envelope.Success && s.sent.Load() != 1 {
		t.Errorf("success, but the server applied it %d times", s.sent.Load())
	}
	if env.Status == envelope.DefiniteFailure && env.Error != nil && env.Error.Code != envelope.CodeStoreUnavailable && env.Error.Code != envelope.CodeCancelled {
		t.Errorf("definite_failure %s, but the server sent the message", env.Error.Code)
	}
}

// blockingSender's send applies the effect, then waits until released
// (or its call is cancelled) before it answers.
func blockingSender(s *countingSender, entered chan<- struct{}, release <-chan struct{}) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "send", Description: "Send a message."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, map[string]string, error) {
			s.sent.Add(1)
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return nil, map[string]string{"sent": in.To}, nil
		})
	return srv
}

// honest checks an envelope against what the server did for its action.
func mustBeHonest(t *testing.T, env envelope.Envelope, sent int64) {
	t.Helper()
	switch env.Status {
	case envelope.Success:
		if sent != 1 {
			t.Errorf("success, but the server applied the action %d times: %s", sent, env)
		}
	case envelope.DefiniteFailure:
		if env.Earlier != nil && env.Attempts == 0 {
			// Held back by the earlier action, which it names
			// (key_reused_with_different_input, earlier_action_applied):
			// this call applied nothing, as docs/envelope.md says.
			return
		}
		if sent != 0 && (env.Error == nil || (env.Error.Code != envelope.CodeStoreUnavailable && env.Error.Code != envelope.CodeCancelled) ||
			!strings.Contains(env.Note, agenttool.NoteNotThisCall)) {
			t.Errorf("definite_failure, but the server applied the action: %s", env)
		}
	case envelope.UnknownOutcome:
	default:
		t.Errorf("no envelope: %s", env)
	}
}

// Identical calls in parallel, from two client sessions of one principal,
// each with its own progress token and an idempotency key of its own in
// _meta: the server sends the message once, and every answer is honest.
func TestOneEffect_ParallelCopiesAcrossSessionsWithMetaKeysSendOnce(t *testing.T) {
	s := &countingSender{}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	g := guardOver(t, blockingSender(s, entered, release), senderConfig, mcpguard.Options{})
	sessions := []*mcp.ClientSession{connect(t, g), connect(t, g)}
	msg := map[string]any{"to": "bob@example.com", "text": "the contract is signed"}
	var wg sync.WaitGroup
	envs := make([]envelope.Envelope, 6)
	for i := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			meta := mcp.Meta{"progressToken": fmt.Sprintf("p-%d", i), "idempotency_key": fmt.Sprintf("k-%d", i)}
			_, envs[i] = call(t, sessions[i%2], "send", msg, meta)
		}()
		if i == 0 {
			<-entered // the first copy is at the server
		}
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := s.sent.Load(); n != 1 {
		t.Errorf("the server sent the message %d times for one action", n)
	}
	for _, env := range envs {
		mustBeHonest(t, env, s.sent.Load())
	}
}

// A call the client cancels (notifications/cancelled) after the server
// sent the message: the call is unknown at best; the resend and a
// reworded copy, from a new session, send nothing more.
func TestOneEffect_ACancelledCallIsNeverSentAgain(t *testing.T) {
	s := &countingSender{}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	g := guardOver(t, blockingSender(s, entered, release), senderConfig, mcpguard.Options{})
	cs := connect(t, g)
	msg := map[string]any{"to": "bob@example.com", "text": "the contract is signed"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "send", Arguments: msg})
		done <- err
	}()
	<-entered
	cancel()
	<-done
	cs.Close() // the client goes away, and comes back on a new session
	again := connect(t, g)
	_, resend := call(t, again, "send", msg, nil)
	_, reworded := call(t, again, "send", map[string]any{"text": "The contract is signed", "to": "BOB@example.com"}, nil)
	t.Logf("resend: %s; reworded: %s", resend, reworded)
	if n := s.sent.Load(); n != 1 {
		t.Errorf("the server sent the message %d times for one action", n)
	}
	for _, env := range []envelope.Envelope{resend, reworded} {
		mustBeHonest(t, env, s.sent.Load())
		if env.Status == envelope.Success {
			t.Errorf("success, but the server never answered: %s", env)
		}
	}
}
