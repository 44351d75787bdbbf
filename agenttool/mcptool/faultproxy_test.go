package mcptool_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// fault is what the proxy does to the first tools/call it forwards; every
// other request goes through untouched.
type fault int

const (
	noFault fault = iota
	// duplicateDelivery delivers the call twice: the second copy while the
	// first is still being handled (after proxy.between returns). The
	// client gets the answer that comes back first; proxy.afterSecond runs
	// when the second copy's answer is in.
	duplicateDelivery
	// retryAfterTimeout delivers the call, gives up waiting for it (its
	// answer, once it comes, is dropped) and delivers it again; the client
	// gets the second answer.
	retryAfterTimeout
	// dropResponse delivers the call and cuts the connection before a byte
	// of its answer reaches the client.
	dropResponse
	// sessionLossBefore fails over to the second backend before the call
	// is delivered: the call reaches a server that does not know its MCP
	// session, and no tool.
	sessionLossBefore
	// sessionLossAfter delivers the call to the first backend, loses its
	// answer, fails over and delivers it again to the second backend,
	// which does not know its MCP session.
	sessionLossAfter
)

func (f fault) String() string {
	return [...]string{"no fault", "duplicate delivery", "retry after timeout", "dropped response",
		"session loss before the call", "session loss after the call"}[f]
}

// proxy is a fault-injecting HTTP proxy in front of one MCP server served
// by two backends (two replicas of a streamable HTTP handler, each with
// its own MCP sessions; the second serves after a failover). It forwards
// requests as they came, headers and body, and copies of them on
// contexts of their own, as a proxy's upstream requests are.
type proxy struct {
	backends [2]http.Handler
	fault    fault
	// between, if set, runs after the first copy of a duplicated call was
	// handed to the backend and before the second is (wait there until the
	// tool runs, say).
	between func()
	// afterSecond, if set, runs once the second copy's answer is in.
	afterSecond func()

	active    atomic.Int32 // the backend in use
	calls     atomic.Int64 // tools/call requests from the client
	delivered atomic.Int64 // tools/call requests handed to a backend
	inFlight  atomic.Int64 // tools/call requests a backend has not answered yet
	copies    sync.WaitGroup
}

// newProxy serves p on loopback and returns its URL.
func newProxy(t *testing.T, p *proxy) string {
	t.Helper()
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.Close()
		p.copies.Wait()
	})
	return srv.URL
}

// settle waits until every copy the proxy sent has been answered.
func (p *proxy) settle() { p.copies.Wait() }

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	isCall := r.Method == http.MethodPost && bytes.Contains(body, []byte(`"tools/call"`))
	if !isCall {
		p.backend().ServeHTTP(w, withBody(r, r.Context(), body))
		return
	}
	if n := p.calls.Add(1); n != 1 || p.fault == noFault {
		p.deliver(w, r, body)
		return
	}
	switch p.fault {
	case duplicateDelivery:
		answers := make(chan *capture, 2)
		p.copies.Add(2)
		go func() { defer p.copies.Done(); answers <- p.forward(r, body) }()
		if p.between != nil {
			p.between()
		}
		go func() {
			defer p.copies.Done()
			c := p.forward(r, body)
			if p.afterSecond != nil {
				p.afterSecond()
			}
			answers <- c
		}()
		(<-answers).writeTo(w)
	case retryAfterTimeout:
		p.forward(r, body) // its answer comes too late, and is dropped
		p.deliver(w, r, body)
	case dropResponse:
		p.forward(r, body)
		panic(http.ErrAbortHandler) // net/http closes the connection
	case sessionLossBefore:
		p.active.Store(1)
		p.deliver(w, r, body)
	case sessionLossAfter:
		p.forward(r, body) // lost with the first backend
		p.active.Store(1)
		p.deliver(w, r, body)
	}
}

func (p *proxy) backend() http.Handler { return p.backends[p.active.Load()] }

// deliver forwards a tools/call and streams its answer to the client.
func (p *proxy) deliver(w http.ResponseWriter, r *http.Request, body []byte) {
	p.delivered.Add(1)
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	p.backend().ServeHTTP(w, withBody(r, r.Context(), body))
}

// forward delivers a copy of a tools/call on a context of its own and
// returns its whole answer.
func (p *proxy) forward(r *http.Request, body []byte) *capture {
	p.delivered.Add(1)
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	c := &capture{header: http.Header{}, status: http.StatusOK}
	p.backend().ServeHTTP(c, withBody(r, context.WithoutCancel(r.Context()), body))
	return c
}

func withBody(r *http.Request, ctx context.Context, body []byte) *http.Request {
	r = r.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return r
}

// capture is a whole HTTP answer, kept.
type capture struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (c *capture) Header() http.Header { return c.header }
func (c *capture) Flush()              {}

func (c *capture) WriteHeader(code int) {
	if !c.wrote {
		c.wrote, c.status = true, code
	}
}

func (c *capture) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return c.body.Write(b)
}

func (c *capture) writeTo(w http.ResponseWriter) {
	for k, v := range c.header {
		w.Header()[k] = v
	}
	w.WriteHeader(c.status)
	w.Write(c.body.Bytes())
}
