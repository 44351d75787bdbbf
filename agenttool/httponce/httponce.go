// Package httponce sends a guarded tool's HTTP request at most once per
// attempt: net/http's own transport resends some requests by itself, and
// a resend the tool never sees can do an action twice under one attempt.
//
//	client := httponce.Client(nil)
//	req, _ := http.NewRequestWithContext(ctx, "POST", url, body)
//	req.Header.Set("Idempotency-Key", agenttool.RequestRef(ctx)) // Keyed tools only: see below
//	resp, err := client.Do(req)
//	if err != nil {
//		return out, err // envelope.Classify: a dial error is transient, anything after sending is unknown
//	}
//	defer resp.Body.Close()
//	if err := httponce.Check(resp); err != nil {
//		return out, err // a 4xx is definite, a 5xx or 429 transient or unknown (envelope.ClassifyHTTP)
//	}
//
// # What net/http resends, and what that proves
//
// HTTP/1.1 (net/http's Transport): a request sent on a reused keep-alive
// connection that breaks before the first byte of the answer is sent
// again on a new connection when the request is "replayable": a GET,
// HEAD, OPTIONS or TRACE, or any request that carries an Idempotency-Key
// or X-Idempotency-Key header — provided its body is empty or can be
// rewound (Request.GetBody, which http.NewRequest sets for a
// bytes.Buffer, bytes.Reader or strings.Reader body). The connection
// broke after the request was written: the server may have acted. A
// keyed destination that honours the header replays the resend (and the
// tool would take the replay for another caller's request); any other
// does the action twice, and the tool sees one success. A request that
// was certainly not written (the transport says so) is resent too: that
// proves nothing was sent.
//
// HTTP/2 (net/http's bundled client): a request is sent again on another
// connection when the connection could not take it (nothing was sent),
// when the server's GOAWAY names a last stream below the request's, or
// when the server refused the stream (REFUSED_STREAM): both of those
// promise the request was not processed (RFC 9113, section 8.7). It is
// also sent again when the server reset the stream with PROTOCOL_ERROR,
// which proves nothing. Each needs a body that is empty or can be
// rewound.
//
// The transport of this package sends every request whose method is not
// safe (anything but GET, HEAD, OPTIONS and TRACE) with a body that cannot
// be rewound: GetBody cleared, and a request with no body given an empty
// one of unknown length (over HTTP/1.1 it goes as Transfer-Encoding:
// chunked, with no bytes). net/http then resends none of them, not even
// the resends that would have been proven safe: a failure is the tool's,
// and the guarded call decides what it means — envelope.Classify calls a
// failure to dial transient and anything after sending unknown, and a
// Keyed tool's next attempt goes with the same key. Safe methods are left
// as they are: a read does nothing twice.
//
// # Which classes may send the reference as a key
//
// Send agenttool.RequestRef(ctx) as the Idempotency-Key of a Keyed tool's
// request: that is what Keyed means, and its destination replays a
// repeat. An at-most-once or reconcilable tool's destination ignores the
// header (or the tool would be Keyed): the reference belongs in the
// request's own fields (a client reference, a Message-ID) so that a
// reconciler can look it up, and a header named Idempotency-Key only made
// net/http resend it. Through this package the header is harmless either
// way.
//
// The transport and the client are safe for concurrent use.
package httponce

import (
	"io"
	"net/http"
	"strings"

	"github.com/retrysafe/retrysafe/envelope"
)

// Transport returns a RoundTripper that sends each request through base,
// making every request of an unsafe method impossible to resend (see the
// package doc). A nil base means http.DefaultTransport.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if t, ok := base.(transport); ok {
		return t
	}
	return transport{base: base}
}

// Client returns a copy of c whose transport is Transport(c.Transport). A
// nil c means http.DefaultClient.
func Client(c *http.Client) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	out := *c
	out.Transport = Transport(c.Transport)
	return &out
}

type transport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper. It does not change req: it
// sends a copy.
func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if safe(req.Method) {
		return t.base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.GetBody = nil // no rewind: no resend of a request that may have been sent
	if r.Body == nil || r.Body == http.NoBody {
		// An empty request is always replayable to net/http: give it a
		// body it cannot rewind.
		r.Body, r.ContentLength = emptyBody{}, 0
	}
	return t.base.RoundTrip(r)
}

// safe reports whether method is one of HTTP's safe methods, which net/http
// may resend: a read.
func safe(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// emptyBody is a request body with no bytes that net/http cannot rewind.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// Check returns nil for a 2xx response, and otherwise an
// *envelope.HTTPError with the status, the request's method and the start
// of the response's body (at most 512 bytes, read from resp.Body), which
// envelope.Classify classes as envelope.ClassifyHTTP says: a 4xx is a
// definite failure (the destination refused: nothing was done) but for
// 408, 409, 425 and 429 (transient), and a 5xx of a POST is unknown. A
// non-2xx returned as a plain error would read as unknown, and hold the
// conversation's next writes until it is settled.
func Check(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	method := http.MethodPost
	if resp.Request != nil && resp.Request.Method != "" {
		method = resp.Request.Method
	}
	var msg []byte
	if resp.Body != nil {
		msg, _ = io.ReadAll(io.LimitReader(resp.Body, 512))
	}
	return &envelope.HTTPError{StatusCode: resp.StatusCode, Method: method, Message: strings.TrimSpace(string(msg))}
}
