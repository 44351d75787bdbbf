// Package httpsend sends a guarded tool's HTTP request at most once per
// attempt: net/http does not send it again by itself. And it turns a
// response that is not 2xx into an error of the right class.
//
// # Basics
//
// Give the tool's client a [Transport], and check each response with
// [Check]:
//
//	client := &http.Client{Transport: &httpsend.Transport{}}
//	...
//	resp, err := client.Do(req)
//	if err != nil {
//		return out, err // transient if the request was not sent, unknown if it was
//	}
//	defer resp.Body.Close()
//	if err := httpsend.Check(resp); err != nil {
//		return out, err // a 422 is definite, a 503 transient, a 500 unknown
//	}
//
// An attempt of a guarded tool is then one request at most. What happens
// after an attempt whose outcome is unknown is the engine's to decide (a
// keyed tool is retried with the same key, a reconcilable one is checked
// first, an at-most-once one stops), and nothing below it sends the
// request again behind its back.
//
// # What net/http sends again by itself
//
// Read from Go 1.26's net/http (transport.go, and h2_bundle.go for
// HTTP/2), and checked by this package's tests:
//
//   - HTTP/1. On a keep-alive connection that served a request before,
//     the transport sends a request again on another connection when
//     nothing of it was written; and also when it was written and the
//     connection then failed before the first byte of a response, if the
//     request is replayable: a GET, HEAD, OPTIONS or TRACE, or any
//     request with an Idempotency-Key or X-Idempotency-Key header, whose
//     body is empty or can be made again (Request.GetBody, which
//     http.NewRequest sets for a bytes or strings reader). The destination
//     may have acted on the first copy. So a POST with the request
//     reference as its Idempotency-Key is sent twice when the server
//     drops the connection after acting: a destination that honours the
//     key replays it (to a tool that cannot tell it from an earlier
//     call's), one that ignores the header acts twice, and the tool sees
//     one success. Clearing GetBody stops it for a request with a body,
//     not for a POST without one. On a connection of its own, never used
//     before, the transport sends no request again.
//   - HTTP/2. The transport sends a request again, on the same connection
//     or another, after the server reset its stream with REFUSED_STREAM,
//     or sent a GOAWAY that leaves the stream out: both promise that the
//     server did not process it (RFC 9113, sections 8.7 and 6.8). It does
//     so also after a reset with PROTOCOL_ERROR from the server
//     (golang.org/issue/47635), which promises nothing; whatever the
//     request's method and headers; and without telling a RoundTripper
//     which of these it is retrying. A connection that breaks is not
//     retried.
//
// # What Transport does
//
// It sends every request on a connection of its own (its clone of Base
// keeps no connection alive), so the HTTP/1 transport never sends one
// again, and no server can close an idle connection just as a request is
// written on it. And it watches each round trip (net/http/httptrace):
// once the request's head may have been written, a new connection taken
// for it can only be for sending it again, so Transport ends the round
// trip there, by cancelling the request's context, which the HTTP/2
// transport checks before it writes a new stream's headers. The error is
// [ErrNotResent], classed unknown. A retry before anything was written
// (a connection that could take no new stream) goes on.
//
// A reset with REFUSED_STREAM, or a GOAWAY, after the head was written
// is stopped too, and answered unknown although the server promised it
// did nothing: Transport cannot tell them from a PROTOCOL_ERROR. With one
// connection per request, they come only from a server that is refusing
// work or going away at that moment.
//
// Its other errors say what they mean for the effect: one that came
// before the request's head was written (a refused connection, DNS, the
// TLS handshake, a proxy, a context that ended first) is transient
// ([envelope.MarkTransient]): nothing was sent. One after it is unknown
// ([envelope.MarkUnknown]). So is any error of a request http.Client
// makes to follow a redirect: the request that got the redirect was sent
// (a POST answered 303 See Other was acted on), whatever became of the
// follow-up.
//
// # Which classes send the request reference as a key
//
//   - Keyed: yes, that is what Keyed means. The destination applies a key
//     once and answers its repeats with the first outcome: send the
//     request reference (agenttool.RequestRef) as its Idempotency-Key, and
//     call agenttool.DestinationReplayed when it says it replayed.
//   - Reconcilable and AtMostOnce: the destination does not deduplicate.
//     The reference may still go where the destination records it (a
//     client reference, a Message-ID, a metadata field), for a Reconciler
//     or a person to find the action by; but nothing may send the request
//     twice. Through net/http's own transport, a header named
//     Idempotency-Key makes a POST replayable, and such a destination acts
//     twice. Through Transport no request is sent twice, whatever its
//     headers; still, name the header after what the destination does
//     with it.
//
// # Caveats
//
//   - A connection per request: each one pays a TCP connect and, for
//     https, a TLS handshake. A tool sends few requests; send a tool's
//     high-volume reads through another client.
//   - Only net/http's own HTTP/1 and HTTP/2. HTTP/2 from
//     golang.org/x/net/http2 configured onto Base, and a protocol
//     registered on Base with RegisterProtocol (which its clone does not
//     carry), are not covered; nor is a RoundTripper wrapped around
//     Transport that retries.
//   - A proxy or gateway between the tool and the destination may send a
//     request again on its own. A destination's replay may then be of the
//     attempt's own request: the engine counts a replay as an earlier
//     call's only when its record proves an earlier attempt
//     (agenttool.DestinationReplayed).
//   - Sending once does not make the outcome known: when the connection
//     fails after the request went out, the attempt's outcome is unknown,
//     as it should be, and the tool's class decides what comes next.
package httpsend
