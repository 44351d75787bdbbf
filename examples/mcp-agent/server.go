package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/envelope"
)

// bookingRequest is book_flight's input.
type bookingRequest struct {
	Flight    string `json:"flight" desc:"flight number, e.g. TP1234"`
	Date      string `json:"date" desc:"departure date, YYYY-MM-DD"`
	Passenger string `json:"passenger" desc:"passenger's full name"`
}

// booking is one seat booked.
type booking struct {
	Confirmation string `json:"confirmation"`
	Flight       string `json:"flight"`
	Date         string `json:"date"`
	Passenger    string `json:"passenger"`
}

// bookingService is the destination behind the MCP server's book_flight.
// It honours an idempotency key the way the booking API of
// examples/booking-agent does, here in process: the first request with a
// key is processed, a repeat with the same parameters gets the first
// booking back, a repeat with other parameters is refused.
type bookingService struct {
	log func(format string, args ...any)
	// hold, if set, runs before the first booking is made (a slow
	// service: see duplicateFirstCall).
	hold     func(ctx context.Context)
	holdOnce sync.Once

	mu       sync.Mutex
	keys     map[string]keyEntry
	bookings []booking
}

type keyEntry struct {
	fingerprint [32]byte
	booking     booking
}

func (s *bookingService) book(ctx context.Context, key string, in bookingRequest) (booking, error) {
	if key == "" {
		return booking{}, envelope.MarkDefinite(errors.New("an idempotency key is required"), "bad_request")
	}
	if s.hold != nil {
		s.holdOnce.Do(func() { s.hold(ctx) })
	}
	body, _ := json.Marshal(in)
	fp := sha256.Sum256(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, seen := s.keys[key]; seen {
		if e.fingerprint != fp {
			return booking{}, envelope.MarkDefinite(errors.New("the idempotency key was used with other parameters"), "key_reused")
		}
		s.log("booking service: key %s seen before, returning %s", short(key), e.booking.Confirmation)
		return e.booking, nil
	}
	b := booking{Confirmation: fmt.Sprintf("BK-%d", 1001+len(s.bookings)), Flight: in.Flight, Date: in.Date, Passenger: in.Passenger}
	s.keys[key] = keyEntry{fingerprint: fp, booking: b}
	s.bookings = append(s.bookings, b)
	s.log("booking service: committed %s, %s on %s for %s", b.Confirmation, b.Flight, b.Date, b.Passenger)
	return b, nil
}

func (s *bookingService) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bookings)
}

// Bearer tokens the MCP server accepts: the agent application's own, and
// the signed-in users'. A real server asks its identity provider.
var serverTokens = map[string]string{
	"app-7f3a":  "agent-app",
	"user-9c1d": "tenant-42/user-7",
}

// verifyToken is the server's auth.TokenVerifier.
func verifyToken(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	user, ok := serverTokens[token]
	if !ok {
		return nil, fmt.Errorf("unknown token: %w", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
}

// mcpServer is the MCP server: book_flight guarded by retrysafe, served
// over streamable HTTP on loopback behind the SDK's bearer-token
// middleware.
type mcpServer struct {
	url     string
	srv     *http.Server
	store   *boltstore.Store
	service *bookingService
	copies  *sync.WaitGroup // requests the proxy sends on its own
}

func startMCPServer(fault, db string, log func(string, ...any)) (*mcpServer, error) {
	store, err := boltstore.Open(db, nil)
	if err != nil {
		return nil, err
	}
	svc := &bookingService{log: log, keys: map[string]keyEntry{}}
	book := func(ctx context.Context, in bookingRequest) (booking, error) {
		return svc.book(ctx, agenttool.RequestRef(ctx), in) // the server's own reference is the key
	}
	tool, err := agenttool.New("book_flight", "Book one seat on a flight.", book, agenttool.Options{
		Store: store,
		Class: agenttool.Keyed,
		Hooks: agenttool.Hooks{Outcome: func(_ context.Context, e agenttool.OutcomeEvent) {
			replayed := ""
			if e.Envelope.Replayed {
				replayed = ", replayed"
			}
			log("mcp server: book_flight answered %s%s (server reference %s)", e.Envelope.Status, replayed, short(e.Envelope.RequestRef))
		}},
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "bookings", Version: "1.0.0"}, nil)
	server.AddReceivingMiddleware(logCalls(log))
	// The principal is the token's user; the session, by default, one per
	// principal: whatever connection a resent call comes on, it is replayed.
	if err := mcptool.Register(server, tool, &mcptool.ServerOptions{Class: agenttool.Keyed}); err != nil {
		store.Close()
		return nil, err
	}
	// Stateless: no MCP session to lean on. Under duplicate-delivery the
	// server keeps MCP sessions, as many do, and so refuses a second copy
	// of a request while the first is in flight.
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: fault != "duplicate-delivery"})
	var copies sync.WaitGroup
	switch fault {
	case "lost-response":
		h = loseFirstCallResponse(h, log)
	case "duplicate-delivery":
		h = duplicateFirstCall(h, svc, &copies, log)
	}
	h = auth.RequireBearerToken(verifyToken, nil)(h)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		store.Close()
		return nil, err
	}
	s := &mcpServer{url: "http://" + l.Addr().String(), store: store, service: svc, copies: &copies,
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}}
	go s.srv.Serve(l)
	return s, nil
}

func (s *mcpServer) close() {
	s.srv.Close()
	s.copies.Wait()
	s.store.Close()
}

// logCalls logs each tools/call the server receives: from whom, as the
// verified token says, and the client's request reference, which travels
// in _meta for the logs only.
func logCalls(log func(string, ...any)) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
				user := "nobody"
				if x := req.GetExtra(); x != nil && x.TokenInfo != nil {
					user = x.TokenInfo.UserID
				}
				ref, _ := p.Meta[mcptool.MetaRequestRef].(string)
				log("mcp server: tools/call %s from %s (client reference %s)", p.Name, user, short(ref))
			}
			return next(ctx, method, req)
		}
	}
}

// loseFirstCallResponse lets the first tools/call run, then cuts the
// connection before a byte of its response leaves.
func loseFirstCallResponse(next http.Handler, log func(string, ...any)) http.Handler {
	var lost atomic.Bool
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !bytes.Contains(body, []byte(`"tools/call"`)) || lost.Swap(true) {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(discard{http.Header{}}, r)
		log("http: the response to tools/call is lost: the connection is cut")
		panic(http.ErrAbortHandler) // net/http closes the connection
	})
}

// duplicateFirstCall is a proxy in front of the server that delivers the
// first tools/call twice, the second copy while the first is being
// handled, and hands the client the answer that comes back first. The
// booking service is slow: it books the first copy only once the second
// has been answered. The server (stateful) refuses the second copy with
// HTTP 400, JSON-RPC invalid request "duplicate in-flight request ID":
// that refusal is what the client gets, while the first copy books.
func duplicateFirstCall(next http.Handler, svc *bookingService, copies *sync.WaitGroup, log func(string, ...any)) http.Handler {
	var duplicated atomic.Bool
	entered, answered := make(chan struct{}), make(chan struct{})
	svc.hold = func(ctx context.Context) {
		close(entered)
		select {
		case <-answered:
		case <-ctx.Done():
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(`"tools/call"`)) || duplicated.Swap(true) {
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(w, r)
			return
		}
		log("proxy: the tools/call goes to the server twice")
		send := func(answers chan<- *recorded) {
			defer copies.Done()
			c := &recorded{header: http.Header{}}
			req := r.Clone(context.WithoutCancel(r.Context())) // a copy lives on its own
			req.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(c, req)
			answers <- c
		}
		first, second := make(chan *recorded, 1), make(chan *recorded, 1)
		copies.Add(2)
		go send(first)
		var firstAnswer *recorded
		select {
		case <-entered: // the first copy is being handled
		case firstAnswer = <-first:
		}
		go send(second)
		secondAnswer := <-second
		close(answered)
		log("proxy: the second copy was answered %d %s", secondAnswer.status, strings.TrimSpace(secondAnswer.body.String()))
		if firstAnswer == nil {
			firstAnswer = secondAnswer // it came back first
		}
		firstAnswer.writeTo(w)
	})
}

// recorded is an HTTP answer, kept whole.
type recorded struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *recorded) Header() http.Header { return c.header }
func (c *recorded) Flush()              {}
func (c *recorded) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *recorded) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return c.body.Write(p)
}
func (c *recorded) writeTo(w http.ResponseWriter) {
	for k, v := range c.header {
		w.Header()[k] = v
	}
	w.WriteHeader(c.status)
	w.Write(c.body.Bytes())
}

// discard is a ResponseWriter whose output goes nowhere.
type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(p []byte) (int, error) { return len(p), nil }
func (d discard) WriteHeader(int)             {}
func (d discard) Flush()                      {}

func short(ref string) string {
	if i := strings.IndexByte(ref, '/'); i >= 0 && len(ref) > i+9 {
		return ref[:i+9] + "…"
	}
	return ref
}
