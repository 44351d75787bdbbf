package mcptool_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
)

type flightRequest struct {
	Flight    string `json:"flight"`
	Passenger string `json:"passenger"`
}

// A guarded tool served over MCP, and reached from a guarded client. A
// tools/call resent with the same arguments is replayed by the server.
func Example() {
	ctx := context.Background()
	bookings := 0
	book, err := agenttool.New("book_flight", "Book one seat on a flight.",
		func(ctx context.Context, in flightRequest) (string, error) {
			bookings++
			return fmt.Sprintf("BK-%d", 1000+bookings), nil
		},
		agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	if err != nil {
		fmt.Println(err)
		return
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "bookings", Version: "1.0.0"}, nil)
	err = mcptool.Register(server, book, &mcptool.ServerOptions{
		Class: agenttool.Keyed,
		// Over HTTP the default principal is the verified bearer token's
		// user. In memory there is no token: the application says who is
		// at the other end.
		Principal: func(context.Context, mcptool.Caller) (string, error) { return "tenant-42/user-7", nil },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	serverEnd, clientEnd := mcp.NewInMemoryTransports()
	if _, err := server.Connect(ctx, serverEnd, nil); err != nil {
		fmt.Println(err)
		return
	}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0.0"}, nil).Connect(ctx, clientEnd, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer session.Close()

	// Any MCP client: the same call twice.
	for range 2 {
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "book_flight",
			Arguments: map[string]string{"flight": "TP1234", "passenger": "Ana Lima"}})
		if err != nil {
			fmt.Println(err)
			return
		}
		var env struct {
			Status   string
			Replayed bool
			Result   string
		}
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &env)
		fmt.Println("server:", env.Status, env.Result, "replayed:", env.Replayed, "isError:", res.IsError)
	}

	// A guarded client: its own key and store, on this side.
	tools, err := mcptool.Tools(ctx, session, mcptool.ClientOptions{ByName: map[string]agenttool.Options{
		"book_flight": {Store: memstore.New(), Class: agenttool.Keyed},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx = agenttool.WithScope(ctx, "tenant-42/agent", "conversation-9")
	env := tools[0].Invoke(ctx, `{"passenger":"Ana Lima","flight":"TP1234"}`)
	fmt.Println("client:", env.Status, string(env.Result))
	fmt.Println("bookings:", bookings)
	// Output:
	// server: success BK-1001 replayed: false isError: false
	// server: success BK-1001 replayed: true isError: false
	// client: success "BK-1001"
	// bookings: 1
}
