package mcptool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// seat is the input of the test book_flight tool.
type seat struct {
	Flight    string `json:"flight" desc:"flight number"`
	Date      string `json:"date" desc:"YYYY-MM-DD"`
	Passenger string `json:"passenger"`
}

type booking struct {
	Confirmation string `json:"confirmation"`
	Principal    string `json:"principal"`
	// Ref is the client's request reference the call carried in _meta
	// (see withClientRef), or "".
	Ref string `json:"-"`
}

// desk is the destination behind the server's tool. It does not dedupe:
// every run of the tool is a booking, so a second run would show.
type desk struct {
	mu       sync.Mutex
	bookings []booking
	// fail, if set, decides the error of the n-th run (from 1) before it
	// books anything.
	fail func(n int) error
	// hold, if set, is waited on before booking; entered, if set, is
	// closed when the first run reaches it.
	hold, entered chan struct{}
	enterOnce     sync.Once
	runs          atomic.Int64
}

func (d *desk) book(ctx context.Context, in seat) (booking, error) {
	n := int(d.runs.Add(1))
	if d.fail != nil {
		if err := d.fail(n); err != nil {
			return booking{}, err
		}
	}
	if d.hold != nil {
		if d.entered != nil {
			d.enterOnce.Do(func() { close(d.entered) })
		}
		select {
		case <-d.hold:
		case <-ctx.Done():
			return booking{}, ctx.Err()
		}
	}
	info, _ := agenttool.CallInfoFrom(ctx)
	ref, _ := ctx.Value(clientRefKey{}).(string)
	d.mu.Lock()
	defer d.mu.Unlock()
	b := booking{Confirmation: fmt.Sprintf("BK-%d", 1001+len(d.bookings)), Principal: info.Scope.Principal, Ref: ref}
	d.bookings = append(d.bookings, b)
	return b, nil
}

func (d *desk) all() []booking {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]booking(nil), d.bookings...)
}

func (d *desk) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.bookings)
}

// bookedFor returns the booking made for a call that carried the client's
// request reference ref.
func (d *desk) bookedFor(ref string) (booking, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range d.bookings {
		if b.Ref == ref {
			return b, true
		}
	}
	return booking{}, false
}

// clientRefKey carries, on a tool's context at the server, the client's
// request reference the call carried in _meta: the desk's record of who
// asked, which a truthful reconciler reads.
type clientRefKey struct{}

// withClientRef is a server middleware that puts the _meta request
// reference of each tools/call on its context, under clientRefKey.
func withClientRef(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
			if ref, ok := p.Meta[mcptool.MetaRequestRef].(string); ok {
				ctx = context.WithValue(ctx, clientRefKey{}, ref)
			}
		}
		return next(ctx, method, req)
	}
}

// served is a server with a guarded book_flight on a desk, and the
// envelopes its tool answered.
type served struct {
	server *mcp.Server
	desk   *desk
	mu     sync.Mutex
	envs   []envelope.Envelope
}

func (s *served) envelopes() []envelope.Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]envelope.Envelope(nil), s.envs...)
}

// newServed builds the server. opts are the server tool's options; Store,
// Class and the outcome hook are filled in.
func newServed(t *testing.T, d *desk, opts agenttool.Options, sopts *mcptool.ServerOptions) *served {
	t.Helper()
	s := &served{server: mcp.NewServer(&mcp.Implementation{Name: "bookings", Version: "1"}, nil), desk: d}
	if opts.Store == nil {
		opts.Store = memstore.New()
	}
	if opts.Class == 0 {
		opts.Class = agenttool.Keyed
	}
	opts.Hooks.Outcome = func(_ context.Context, e agenttool.OutcomeEvent) {
		s.mu.Lock()
		s.envs = append(s.envs, e.Envelope)
		s.mu.Unlock()
	}
	if opts.Retry.InitialInterval == 0 {
		opts.Retry.InitialInterval = time.Millisecond
	}
	tool, err := agenttool.New("book_flight", "Book one seat on a flight.", d.book, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := mcptool.Register(s.server, tool, sopts); err != nil {
		t.Fatal(err)
	}
	s.server.AddReceivingMiddleware(withClientRef)
	return s
}

// userKey carries, on the context an in-memory server session is connected
// with, the user the application authenticated for that connection.
type userKey struct{}

// connectionUser is a ServerOptions.Principal for in-memory connections.
func connectionUser(ctx context.Context, _ mcptool.Caller) (string, error) {
	u, _ := ctx.Value(userKey{}).(string)
	return u, nil
}

// connectInMemory connects a client to server over in-memory transports,
// the server side on a context carrying user (none if ""). wrap, if set,
// wraps the server's transport.
func connectInMemory(t *testing.T, server *mcp.Server, user string, wrap func(mcp.Transport) mcp.Transport) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	var serverT mcp.Transport = st
	if wrap != nil {
		serverT = wrap(st)
	}
	sctx := ctx
	if user != "" {
		sctx = context.WithValue(ctx, userKey{}, user)
	}
	ss, err := server.Connect(sctx, serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// tokens is the test servers' token verifier: token "tok-NAME" is user
// NAME.
func tokens(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	user, ok := strings.CutPrefix(token, "tok-")
	if !ok || user == "" {
		return nil, fmt.Errorf("unknown token: %w", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
}

// httpServer serves server over streamable HTTP on loopback, behind the
// SDK's bearer-token middleware unless noAuth, with faults applied before
// the MCP handler.
func httpServer(t *testing.T, server *mcp.Server, stateless, noAuth bool, faults *faults) *httptest.Server {
	t.Helper()
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: stateless})
	if faults != nil {
		h = faults.wrap(h)
	}
	if !noAuth {
		h = auth.RequireBearerToken(tokens, nil)(h)
	}
	srv := httptest.NewServer(h) // 127.0.0.1
	t.Cleanup(srv.Close)
	return srv
}

// bearer adds a bearer token to every request, sent over a transport of
// its own: a test that closes its server must not find a pooled connection
// of another test's, or one the server has closed without the client yet
// knowing (a POST on it is honestly unknown, not unsent).
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// connectHTTP connects a client with token ("" for none) to url.
func connectHTTP(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	cs, err := dialHTTP(t, url, token)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// dialHTTP returns a function that connects a new client session with
// token to url, as ClientOptions.Reconnect wants; the test closes every
// session it made.
func dialHTTP(t *testing.T, url, token string) func(context.Context) (*mcp.ClientSession, error) {
	t.Helper()
	rt := http.DefaultTransport.(*http.Transport).Clone()
	rt.DisableKeepAlives = true
	t.Cleanup(rt.CloseIdleConnections)
	return func(ctx context.Context) (*mcp.ClientSession, error) {
		transport := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, rt}}, MaxRetries: -1}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, transport, nil)
		if err == nil {
			t.Cleanup(func() { cs.Close() })
		}
		return cs, err
	}
}

// replicas returns two replicas of server's streamable HTTP handler, each
// with MCP sessions of its own, behind the SDK's bearer-token middleware:
// the backends of a proxy.
func replicas(server *mcp.Server, stateless bool) [2]http.Handler {
	var out [2]http.Handler
	for i := range out {
		out[i] = auth.RequireBearerToken(tokens, nil)(mcp.NewStreamableHTTPHandler(
			func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: stateless}))
	}
	return out
}

// faults breaks HTTP exchanges on purpose.
type faults struct {
	// dropCalls is how many tools/call POSTs, from the first, have their
	// response lost: the server runs the call, then the connection is
	// cut before a byte of the response leaves.
	dropCalls atomic.Int64
	dropped   atomic.Int64
	// afterHeaders lets the status and headers through before the cut, so
	// that the client sees a response stream end without its message.
	afterHeaders bool
}

func (f *faults) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method != http.MethodPost || !bytes.Contains(body, []byte(`"tools/call"`)) || f.dropCalls.Add(-1) < 0 {
			next.ServeHTTP(w, r)
			return
		}
		sw := &swallow{header: http.Header{}}
		if f.afterHeaders {
			sw.w = w
		}
		next.ServeHTTP(sw, r) // the call runs; its response goes nowhere
		f.dropped.Add(1)
		panic(http.ErrAbortHandler) // net/http closes the connection
	})
}

// swallow is a ResponseWriter whose body is lost, and its status and
// headers too unless w is set.
type swallow struct {
	header http.Header
	w      http.ResponseWriter
	wrote  bool
}

func (s *swallow) Header() http.Header {
	if s.w != nil {
		return s.w.Header()
	}
	return s.header
}

func (s *swallow) WriteHeader(code int) {
	if s.w != nil && !s.wrote {
		s.wrote = true
		s.w.WriteHeader(code)
		s.w.(http.Flusher).Flush()
	}
}

func (s *swallow) Write(p []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return len(p), nil
}

func (s *swallow) Flush() {}

// clientTool guards the server's book_flight on the client side.
func clientTool(t *testing.T, cs *mcp.ClientSession, store agenttool.Store, opts agenttool.Options) *agenttool.Tool {
	t.Helper()
	if store == nil {
		store = memstore.New()
	}
	opts.Store = store
	if opts.Class == 0 {
		opts.Class = agenttool.Keyed
	}
	if opts.Retry.InitialInterval == 0 {
		opts.Retry.InitialInterval = time.Millisecond
	}
	tools, err := mcptool.Tools(context.Background(), cs, mcptool.ClientOptions{ByName: map[string]agenttool.Options{"book_flight": opts}})
	if err != nil {
		t.Fatal(err)
	}
	return tools[0]
}

// agentCtx is the client application's trusted scope.
func agentCtx() context.Context {
	return agenttool.WithScope(context.Background(), "tenant-1/agent", "conversation-1")
}

const anaSeat = `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`

// anaReworded is the model's reworded call for Ana's seat after an unknown
// outcome: another key, the same logical action.
const anaReworded = `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Maria Lima"}`

// callRaw sends one tools/call with arguments and _meta as given, the way
// any MCP client (or a hostile one) can, and returns the envelope it
// carries.
func callRaw(t *testing.T, cs *mcp.ClientSession, args string, meta mcp.Meta) envelope.Envelope {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "book_flight", Arguments: json.RawMessage(args), Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	env, err := envelope.Parse([]byte(text))
	if err != nil {
		t.Fatalf("the result does not carry an envelope: %v\n%s", err, text)
	}
	if res.IsError != (env.Status != envelope.Success) {
		t.Errorf("isError %v for a %s envelope", res.IsError, env.Status)
	}
	return env
}

// cutFirstCallResponse wraps a server's transport: instead of the response
// to the first tools/call, the connection is closed.
func cutFirstCallResponse(t mcp.Transport) mcp.Transport { return &cutTransport{inner: t} }

type cutTransport struct{ inner mcp.Transport }

func (c *cutTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &cutConn{Connection: conn}, nil
}

type cutConn struct {
	mcp.Connection
	mu       sync.Mutex
	call     jsonrpc.ID
	haveCall bool
	cut      bool
}

func (c *cutConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" {
		c.mu.Lock()
		if !c.haveCall {
			c.call, c.haveCall = req.ID, true
		}
		c.mu.Unlock()
	}
	return msg, err
}

func (c *cutConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		cut := c.haveCall && !c.cut && resp.ID == c.call
		c.cut = c.cut || cut
		c.mu.Unlock()
		if cut {
			c.Connection.Close()
			return errors.New("the connection was cut")
		}
	}
	return c.Connection.Write(ctx, msg)
}
