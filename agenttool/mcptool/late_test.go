package mcptool_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// I4 with ToolOptions.LateWindow: a plain server posts a note 300ms after
// the call, past the tool's 100ms attempt timeout. The call is unknown at
// its deadline; the server's answer, heard within the window, settles the
// action by SettleLate, and the next call of the action answers success
// with the server's result, posting nothing more.
func TestALateAnswerSettlesAnUnknownOutcome(t *testing.T) {
	var posted atomic.Int64
	server := mcp.NewServer(&mcp.Implementation{Name: "slow-notes", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "post_note", Description: "Post a note."},
		func(context.Context, *mcp.CallToolRequest, struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, map[string]int64, error) {
			time.Sleep(300 * time.Millisecond) // the post runs to its end
			return nil, map[string]int64{"note": posted.Add(1)}, nil
		})
	cs := connectInMemory(t, server, "", nil)
	tool, settled := settlingLate(t, cs, agenttool.Options{Class: agenttool.AtMostOnce, IdentifyingFields: []string{"text"}, AttemptTimeout: 100 * time.Millisecond},
		mcptool.ToolOptions{LateWindow: 5 * time.Second})
	ctx := agenttool.WithScope(context.Background(), "ana", "chat-1")
	first := tool.Invoke(ctx, `{"text": "standup moved to 10"}`)
	if first.Status != envelope.UnknownOutcome {
		t.Fatalf("a call past its attempt timeout: %s", first)
	}
	select {
	case err := <-settled:
		if err != nil {
			t.Fatalf("settling by the late answer: %v", err)
		}
	case <-time.After(10 * time.Second): // a bound on a broken test, not a timing
		t.Fatal("no late answer was heard")
	}
	again := tool.Invoke(ctx, `{"text": "standup moved to 10"}`)
	if again.Status != envelope.Success || !strings.Contains(string(again.Result), `"note":1`) {
		t.Errorf("after the late answer: %s; want success with the server's result", again)
	}
	if n := posted.Load(); n != 1 {
		t.Errorf("%d notes posted, want 1", n)
	}
}

// keyedDesk is a plain MCP server whose book honours an idempotency key
// as a Stripe-style server does: a key it booked under is answered with
// that booking; a delivery of a key whose first delivery is still being
// processed is refused (isError), changing nothing — the refusal the
// tool's ToolErrors read as definite, as a server whose tools report
// isError only for calls that changed nothing. The first delivery books
// once releaseFirst is closed (nothing, if its call is cancelled first);
// the second delivery of a key answers once releaseSecond is closed.
type keyedDesk struct {
	mu         sync.Mutex
	keys       map[string]string // key → "" while in progress, the booking once done
	deliveries int
	booked     atomic.Int64
}

func (d *keyedDesk) server(releaseFirst, releaseSecond <-chan struct{}) *mcp.Server {
	type bookIn struct {
		Flight         string `json:"flight"`
		Passenger      string `json:"passenger"`
		IdempotencyKey string `json:"idempotency_key,omitempty"`
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "keyed-desk", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "book", Description: "Book one seat."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in bookIn) (*mcp.CallToolResult, map[string]string, error) {
			refused := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
				Text: "a request with this idempotency key is in progress; nothing was done"}}}
			d.mu.Lock()
			d.deliveries++
			n := d.deliveries
			id, seen := d.keys[in.IdempotencyKey]
			switch {
			case seen && id != "":
				d.mu.Unlock()
				return nil, map[string]string{"booking": id}, nil // the first outcome
			case seen:
				d.mu.Unlock()
				if n == 2 {
					<-releaseSecond
				}
				return refused, nil, nil
			}
			d.keys[in.IdempotencyKey] = ""
			d.mu.Unlock()
			select {
			case <-releaseFirst:
			case <-ctx.Done():
				d.mu.Lock()
				delete(d.keys, in.IdempotencyKey)
				d.mu.Unlock()
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "cancelled, nothing booked"}}}, nil, nil
			}
			id = fmt.Sprintf("BK-%d", d.booked.Add(1))
			d.mu.Lock()
			d.keys[in.IdempotencyKey] = id
			d.mu.Unlock()
			return nil, map[string]string{"booking": id}, nil
		})
	return s
}

// I2 with ToolOptions.LateWindow: definite_failure says the effect was
// not applied. A keyed call's first attempt passes its deadline while the
// server still processes it; the tool keeps listening (the window), and
// resends under the same key. The server refuses the resend — the key's
// first delivery is still in progress: this delivery changed nothing —
// but answers after the resend's own deadline, so the refusal is a late
// answer, and SettleLate settles the action as not applied, approving one
// more attempt: the record is at the resend's attempt, and the refusal is
// about it. It says nothing about the first attempt, which is still open
// (the engine's own rule: "a refusal of this attempt says nothing about
// an earlier one that may have applied"). The model's next call runs the
// approved attempt, which the server refuses as the resend, and is
// answered definite_failure; then the first delivery books.
func TestADefiniteFailureNeverAnswersAnActionWhoseEarlierAttemptMayStillLand(t *testing.T) {
	releaseFirst, releaseSecond := make(chan struct{}), make(chan struct{})
	d := &keyedDesk{keys: map[string]string{}}
	cs := connectInMemory(t, d.server(releaseFirst, releaseSecond), "", nil)
	t.Cleanup(func() {
		select {
		case <-releaseFirst:
		default:
			close(releaseFirst)
		}
	})
	tool, settled := settlingLate(t, cs, agenttool.Options{Class: agenttool.Keyed, AttemptTimeout: 100 * time.Millisecond,
		Retry: agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond}},
		mcptool.ToolOptions{RefArgument: "idempotency_key", ToolErrors: mcptool.DefiniteToolErrors, LateWindow: time.Minute})
	heard := func(what string) error {
		select {
		case err := <-settled:
			return err
		case <-time.After(10 * time.Second): // a bound on a broken test, not a timing
			t.Fatalf("no late answer of %s was heard", what)
			return nil
		}
	}
	ctx := agenttool.WithScope(context.Background(), "ana", "chat-1")
	const seat = `{"flight": "TP1234", "passenger": "Ana Lima"}`
	first := tool.Invoke(ctx, seat)
	if first.Status != envelope.UnknownOutcome || first.Attempts != 2 {
		t.Fatalf("two attempts past their deadline: %s; want unknown_outcome after 2 attempts", first)
	}
	close(releaseSecond) // the resend's refusal comes, late
	t.Logf("the resend's late refusal settled: %v", heard("the resend"))
	again := tool.Invoke(ctx, seat)
	close(releaseFirst) // the first delivery books
	t.Logf("the first delivery's late answer settled: %v", heard("the first delivery"))
	last := tool.Invoke(ctx, seat)
	t.Logf("first: %s\nagain: %s\nlast: %s", first, again, last)
	if n := d.booked.Load(); n != 1 {
		t.Errorf("%d bookings for one action, want 1", n)
	}
	for _, env := range []envelope.Envelope{again, last} {
		if env.Status == envelope.DefiniteFailure && d.booked.Load() > 0 {
			t.Errorf("the server booked the action, and a call of it answers definite_failure: %s", env)
		}
	}
}

// settlingLate wraps the first tool cs lists, on a memstore of its own,
// with opts and to, its late answers settled by mcptool.SettleLate through
// an operator of the tool; each settlement's error comes on the channel.
func settlingLate(t *testing.T, cs *mcp.ClientSession, opts agenttool.Options, to mcptool.ToolOptions) (*agenttool.Tool, <-chan error) {
	t.Helper()
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var op atomic.Pointer[agenttool.Operator]
	settled := make(chan error, 4)
	to.Late = func(info agenttool.CallInfo, result string, err error) {
		_, serr := mcptool.SettleLate(context.Background(), op.Load(), info, result, err, "test")
		settled <- serr
	}
	opts.Store = memstore.New()
	tool, err := mcptool.NewToolWith(cs, list.Tools[0], opts, to)
	if err != nil {
		t.Fatal(err)
	}
	o, err := agenttool.NewOperator(opts.Store, tool)
	if err != nil {
		t.Fatal(err)
	}
	op.Store(o)
	return tool, settled
}
