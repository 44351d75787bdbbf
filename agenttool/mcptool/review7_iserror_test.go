package mcptool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// plainBookings is an ordinary MCP server written the way the Go SDK
// recommends (mcp.AddTool with a typed handler). Its book_flight calls a
// downstream booking API; the API commits, and its reply is lost. The
// handler returns the Go error it got, as every handler does — and the SDK
// packs every handler error into a result with isError set.
type plainBookings struct {
	mu       sync.Mutex
	bookings []string
	loseNext bool
}

func (p *plainBookings) count() int { p.mu.Lock(); defer p.mu.Unlock(); return len(p.bookings) }

func (p *plainBookings) server() *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "plain-bookings", Version: "1"}, nil)
	type in struct {
		Flight    string `json:"flight"`
		Date      string `json:"date"`
		Passenger string `json:"passenger"`
	}
	type out struct {
		Confirmation string `json:"confirmation"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "book_flight", Description: "Book one seat."},
		func(ctx context.Context, _ *mcp.CallToolRequest, args in) (*mcp.CallToolResult, out, error) {
			p.mu.Lock()
			p.bookings = append(p.bookings, args.Passenger)
			conf := fmt.Sprintf("BK-%d", 1000+len(p.bookings))
			lose := p.loseNext
			p.loseNext = false
			p.mu.Unlock()
			if lose {
				// The downstream API committed; its reply never came back.
				return nil, out{}, fmt.Errorf("POST https://api.airline.example/bookings: %w", context.DeadlineExceeded)
			}
			return nil, out{Confirmation: conf}, nil
		})
	return server
}

// BREAK (b) then (a): the ordinary server's handler reports "context
// deadline exceeded" after the downstream API committed (an unknown
// outcome in every classifier of this repository: envelope.Classify says
// Unknown for it). The SDK packs it as isError, and the guarded MCP client
// reads every isError as a definite failure: the model is told
// definite_failure ("this call applied nothing") while the seat is
// booked, and the action is recorded Failed. Because it is not unknown,
// the unknown fence does not hold the model's reworded retry in the same
// conversation: a second booking.
func TestReview7_AnIsErrorTimeoutIsNotADefiniteFailure(t *testing.T) {
	if envelope.Classify(fmt.Errorf("x: %w", context.DeadlineExceeded)) != envelope.Unknown {
		t.Fatal("premise: a deadline is unknown for envelope.Classify")
	}
	p := &plainBookings{loseNext: true}
	// Keyed is refused for a server that serves no envelopes: nothing says
	// it dedupes a resent call.
	if _, err := mcptool.Tools(context.Background(), connectInMemory(t, p.server(), "", nil), mcptool.ClientOptions{
		ByName: map[string]agenttool.Options{"book_flight": {Store: memstore.New(), Class: agenttool.Keyed}},
	}); !errors.Is(err, agenttool.ErrInvalidOptions) {
		t.Fatalf("Keyed over a plain server: %v; want ErrInvalidOptions", err)
	}
	book := guardedByName(t, connectInMemory(t, p.server(), "", nil), "book_flight", agenttool.AtMostOnce)
	ctx := agenttool.WithScope(context.Background(), "tenant-1/ana", "conversation-1")

	first := book.Invoke(ctx, `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`)
	t.Logf("first: %s (bookings at the destination: %d)", first, p.count())
	if p.count() == 1 && first.Status != envelope.UnknownOutcome {
		t.Errorf("the destination booked the seat and its reply was lost, but the envelope says %s; want unknown_outcome", first)
	}
	// The model, told that nothing happened, tries again with the
	// passenger's full name: a new key, and no unknown record to fence it.
	second := book.Invoke(ctx, `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Maria Lima"}`)
	t.Logf("second: %s (bookings at the destination: %d)", second, p.count())
	if n := p.count(); n > 1 {
		t.Errorf("one logical action, %d bookings at the destination", n)
	}
	if second.Status != envelope.UnknownOutcome || second.Error.Code != envelope.CodeEarlierUnknown {
		t.Errorf("the reworded call answered %s; want unknown_outcome, held back by the unknown fence", second)
	}
}

// BREAK (b), the same rule through a gateway: a retrysafe server's
// unknown_outcome reaches the client through an MCP gateway that prefixes
// tool names (as aggregating proxies do: "bookings_book_flight"), passing
// the result through untouched. The envelope names "book_flight", so the
// client does not read it as the server's envelope; the result has
// isError, so the client answers definite_failure — for a booking that the
// server itself reported may have happened (and that did happen).
func TestReview7_AnUnknownEnvelopeThroughAGatewayIsNotDefinite(t *testing.T) {
	inner := struct{ server *mcp.Server }{mcp.NewServer(&mcp.Implementation{Name: "bookings", Version: "1"}, nil)}
	// The inner tool books, then loses the reply: unknown.
	var booked desk
	innerTool, err := agenttool.New("book_flight", "Book one seat on a flight.", func(ctx context.Context, in seat) (booking, error) {
		booked.book(ctx, in)
		return booking{}, envelope.MarkUnknown(fmt.Errorf("read: connection reset by peer"))
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
	if err != nil {
		t.Fatal(err)
	}
	if err := mcptool.Register(inner.server, innerTool, &mcptool.ServerOptions{Principal: connectionUser}); err != nil {
		t.Fatal(err)
	}
	upstream := connectInMemory(t, inner.server, "ana", nil)
	var listed *mcp.Tool
	for tl, err := range upstream.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		listed = tl
	}
	gateway := mcp.NewServer(&mcp.Implementation{Name: "gateway", Version: "1"}, nil)
	gateway.AddTool(&mcp.Tool{Name: "bookings_book_flight", Description: listed.Description,
		InputSchema: listed.InputSchema, OutputSchema: listed.OutputSchema},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return upstream.CallTool(ctx, &mcp.CallToolParams{Name: "book_flight", Arguments: req.Params.Arguments})
		})
	book := guardedByName(t, connectInMemory(t, gateway, "", nil), "bookings_book_flight", agenttool.Keyed)
	env := book.Invoke(agentCtx(), anaSeat)
	t.Logf("client: %s (bookings: %d)", env, booked.count())
	if booked.count() == 1 && env.Status == envelope.DefiniteFailure {
		t.Errorf("the server answered unknown_outcome for a booking that happened; the client says definite_failure (%s)", env.Error.Code)
	}
}
