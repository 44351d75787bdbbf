package httpsend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"github.com/retrysafe/retrysafe/envelope"
)

// ErrNotResent is the cause of a round trip that [Transport] ended rather
// than let net/http send its request again: the request's head had been
// written, so the destination may have acted on it. The error RoundTrip
// returns wraps it and is classed unknown ([envelope.MarkUnknown]).
var ErrNotResent = errors.New("the request was sent, and its connection failed before the response came; it was not sent again")

// Transport is an [http.RoundTripper] that sends each request at most
// once: net/http does not send it again by itself once any of it may have
// reached the destination. Its errors say whether the request may have
// been sent: one returned before the request's head was written is
// classed transient ([envelope.MarkTransient]: nothing was sent, trying
// again is safe), any other unknown ([envelope.MarkUnknown]). See the
// package documentation for how, and for what it costs.
//
// The zero value is ready to use, with [http.DefaultTransport]'s
// settings. A Transport is safe for concurrent use by multiple goroutines;
// Base must not change after its first request.
type Transport struct {
	// Base gives the settings requests are sent with: proxy, dialer, TLS,
	// HTTP/2 and timeouts. Transport sends through a clone of it with
	// keep-alives off; Base itself is neither used nor changed. nil means
	// http.DefaultTransport's settings.
	Base *http.Transport

	once sync.Once
	sent *http.Transport
}

// transport returns the clone of Base that requests are sent through.
func (t *Transport) transport() *http.Transport {
	t.once.Do(func() {
		base := t.Base
		if base == nil {
			base, _ = http.DefaultTransport.(*http.Transport)
		}
		if base == nil { // http.DefaultTransport was replaced by another kind
			base = &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
		}
		t.sent = base.Clone()
		// A request on a connection of its own is never sent again by the
		// HTTP/1 transport, and no idle connection can be found closed
		// by the server just as a request is written on it.
		t.sent.DisableKeepAlives = true
	})
	return t.sent
}

// RoundTrip sends req once, on a connection of its own. It implements
// [http.RoundTripper]; req is not modified.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, stop := context.WithCancelCause(req.Context())
	g := &guard{stop: stop, follows: req.Response != nil}
	resp, err := t.transport().RoundTrip(req.WithContext(httptrace.WithClientTrace(ctx, g.trace())))
	if err != nil {
		err = g.classify(err, context.Cause(ctx))
		stop(nil)
		return nil, err
	}
	resp.Request = req
	body := &releasingBody{ReadCloser: resp.Body, release: stop}
	if w, ok := resp.Body.(io.Writer); ok { // a protocol switch (101): the body is the connection
		resp.Body = &releasingStream{body, w}
	} else {
		resp.Body = body
	}
	return resp, nil
}

// guard watches one round trip: once the request's head may have been
// written, a new connection for it means net/http is about to send it
// again, and the guard ends the round trip first.
type guard struct {
	stop context.CancelCauseFunc
	sent atomic.Bool // the request's head may have been written
	// follows is set for a request that follows a redirect (its Response
	// is the redirect's): http.Client makes it after the request that got
	// the redirect was sent, and that one may have been acted on (a POST
	// answered 303 See Other). An error of the follow-up is never
	// "nothing was sent".
	follows bool
}

func (g *guard) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GetConn:      func(string) { g.again() },
		GotConn:      func(httptrace.GotConnInfo) { g.again() },
		WroteHeaders: func() { g.sent.Store(true) },
	}
}

// again is called whenever the transport looks for a connection for the
// request. Before anything was sent, it is the first connection, or the
// transport's retry of a request of which nothing was written: both go
// on. After, it is a resend, and the request's context is cancelled: the
// HTTP/2 transport checks it before it writes the head of a new stream.
// (The HTTP/1 transport resends only on a connection that served a
// request before, and with keep-alives off there is none.)
func (g *guard) again() {
	if g.sent.Load() {
		g.stop(ErrNotResent)
	}
}

// classify marks err, the round trip's error, with what it means for the
// request: cause is the cause of its context's end, if it ended.
func (g *guard) classify(err, cause error) error {
	switch {
	case errors.Is(cause, ErrNotResent):
		return envelope.MarkUnknown(ErrNotResent)
	case g.sent.Load():
		return envelope.MarkUnknown(err)
	case g.follows:
		return envelope.MarkUnknown(fmt.Errorf("following a redirect from a request that was sent: %w", err))
	}
	return envelope.MarkTransient(err)
}

// releasingBody is a response body that releases its round trip's context
// when it is closed.
type releasingBody struct {
	io.ReadCloser
	release context.CancelCauseFunc
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release(nil)
	return err
}

// releasingStream is the body of a protocol switch, which is written too.
type releasingStream struct {
	*releasingBody
	io.Writer
}
