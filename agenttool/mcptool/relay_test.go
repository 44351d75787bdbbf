package mcptool_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/reconcile"
)

// A client's answers, and the requestState it echoes, belong to the one
// tool its call reached: a reconciler that asks the server with another
// tool of the same kind (made with RelayInput too), on the call's context,
// must not send that tool the answers — they were given to another
// question, of another action.
func TestRelay_AnswersReachOnlyTheToolTheClientCalled(t *testing.T) {
	up := mcp.NewServer(&mcp.Implementation{Name: "sender", Version: "1"}, nil)
	type msgIn struct {
		Text string `json:"text"`
	}
	var mu sync.Mutex
	var findGot []string
	mcp.AddTool(up, &mcp.Tool{Name: "send_message"}, func(_ context.Context, req *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
		if req.Params.RequestState == "" {
			return &mcp.CallToolResult{RequestState: "draft-1", InputRequests: mcp.InputRequestMap{
				"confirm": &mcp.ElicitParams{Message: "Send it?", RequestedSchema: map[string]any{"type": "object"}}}}, nil, nil
		}
		// Sent, and the reply is lost: the outcome is unknown.
		return nil, nil, fmt.Errorf("connection reset after sending")
	})
	type findIn struct {
		Ref string `json:"ref"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "find_message"}, func(_ context.Context, req *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		findGot = append(findGot, fmt.Sprintf("state %q, %d answers", req.Params.RequestState, len(req.Params.InputResponses)))
		mu.Unlock()
		return nil, map[string]bool{"found": false}, nil
	})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := up.Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	upstream, err := mcp.NewClient(&mcp.Implementation{Name: "front", Version: "1"}, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}}).
		Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { upstream.Close() })
	listed, err := upstream.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range listed.Tools {
		byName[tl.Name] = tl
	}
	find, err := mcptool.NewToolWith(upstream, byName["find_message"], agenttool.Options{Class: agenttool.ReadOnly}, mcptool.ToolOptions{RelayInput: true})
	if err != nil {
		t.Fatal(err)
	}
	check := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		find.Invoke(ctx, fmt.Sprintf(`{"ref":%q}`, ref))
		return reconcile.StillPending()
	})
	send, err := mcptool.NewToolWith(upstream, byName["send_message"], agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable,
		Reconciler: check, Retry: agenttool.RetryPolicy{MaxAttempts: 1}}, mcptool.ToolOptions{RelayInput: true, WholeResult: true})
	if err != nil {
		t.Fatal(err)
	}
	front := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	listing := *byName["send_message"]
	if err := mcptool.Register(front, send, &mcptool.ServerOptions{Class: agenttool.Reconcilable, Listing: &listing,
		Principal: func(context.Context, mcptool.Caller) (string, error) { return "ana", nil }}); err != nil {
		t.Fatal(err)
	}
	fct, fst := mcp.NewInMemoryTransports()
	if _, err := front.Connect(context.Background(), fst, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, fmt.Errorf("unused") }}).
		Connect(context.Background(), fct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	args := map[string]any{"text": "Lunch?"}
	asked, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_message", Arguments: args})
	if err != nil || !asked.NeedsInput() {
		t.Fatalf("the first round: %+v, %v; want the server's question", asked, err)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_message", Arguments: args, RequestState: asked.RequestState,
		InputResponses: mcp.InputResponseMap{"confirm": &mcp.ElicitResult{Action: "accept"}}})
	if err != nil {
		t.Fatal(err)
	}
	if env, ok := res.Meta[mcptool.MetaEnvelope]; !ok || !res.IsError {
		t.Errorf("the answering round: %+v (envelope %v); want unknown_outcome", res, env)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(findGot) == 0 {
		t.Fatal("the reconciler did not run")
	}
	for _, got := range findGot {
		if got != `state "", 0 answers` {
			t.Errorf("the check tool was sent %s; want none of the client's answers to send_message's question", got)
		}
	}
}
