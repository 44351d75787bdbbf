package mcptool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/envelope"
)

// refusals are the JSON-RPC error codes with which the SDK refuses a
// request before dispatching it, and the envelope codes they become. They
// prove that no tool ran only when the server's tools never answer with a
// JSON-RPC error themselves (a server made with [Register]), and only
// when every copy of the request meets the same refusal: invalid-request
// is not here, because the SDK answers it to a second copy of a request
// whose id is in flight, while the first copy runs.
var refusals = map[int64]string{
	jsonrpc.CodeParseError:                    "parse_error",
	jsonrpc.CodeMethodNotFound:                "method_not_found",
	jsonrpc.CodeInvalidParams:                 "invalid_params",
	mcp.CodeHeaderMismatch:                    "header_mismatch",
	mcp.CodeMissingRequiredClientCapabilities: "missing_client_capabilities",
	mcp.CodeUnsupportedProtocolVersion:        "unsupported_protocol_version",
}

// rejectedByTransport matches the error the SDK's transports wrap around
// a request they did not get a JSON-RPC answer for: a failed HTTP
// exchange, or an HTTP error status, with the JSON-RPC error its body
// carried, if any (jsonrpc2.ErrRejected, code -32005). Such a code refused
// one delivery; another copy of the request may have run.
var rejectedByTransport = &jsonrpc.Error{Code: -32005}

// pingTimeout bounds the ping that tells a closed session from a server's
// answer (see sessionClosed). A closed session answers at once.
const pingTimeout = 2 * time.Second

// callFailed gives an error of ClientSession.CallTool on session s its
// class, by what it proves about the action (see [NewTool]), and marks the
// link's session lost when it can carry nothing more. What it does not
// recognise is returned as it is, for envelope.Classify: the error's own
// marks first, then a failed dial (transient), and anything else unknown.
func (r *remote) callFailed(ctx context.Context, s *mcp.ClientSession, sent *sendMark, err error) error {
	switch {
	case errors.Is(err, mcp.ErrConnectionClosed):
		// The SDK says this of a call it refused to write on a closing or
		// broken connection; but also of a server's answer with the
		// "closing" codes, which a handler may return after it acted, and
		// then end. A session watched by WatchWrites says which it was.
		// Otherwise a session that fails a ping after it is taken for one
		// that was closed before the call: a server that answered with a
		// closing code and then ended is read so too (WatchWrites).
		closed := sessionClosed(ctx, s)
		if closed {
			r.link.lose(s)
		}
		switch {
		case sent.began.Load():
			return envelope.MarkUnknown(fmt.Errorf("%w (the call was written to the MCP server, which may have acted first)", err))
		case closed || r.link.watchesWrites():
			return envelope.MarkTransient(fmt.Errorf("the MCP session was closed before the call was sent: %w", err))
		}
		return envelope.MarkUnknown(fmt.Errorf("%w (the MCP session is still open: this was the server's answer, and it may have acted first)", err))
	case errors.Is(err, mcp.ErrSessionMissing):
		r.link.lose(s)
		return envelope.MarkUnknown(fmt.Errorf("%w (the MCP server no longer knows the session; a copy of the call may have reached it before it ended)", err))
	case errors.Is(err, rejectedByTransport):
		return err
	}
	if code, ok := refusal(err); ok && r.envelopes {
		return envelope.MarkDefinite(fmt.Errorf("the MCP server refused the call before any tool ran: %w", err), code)
	}
	if errors.Is(err, io.EOF) && sessionClosed(ctx, s) {
		// The connection ended with the call in flight (a server process
		// that died after it read the call): unknown, and the session
		// carries nothing more.
		r.link.lose(s)
	}
	return err
}

// sessionClosed reports whether s sends nothing more: a ping on it fails
// at once with mcp.ErrConnectionClosed. The SDK's connection refuses every
// call once it is closing or broken, and never recovers, so a session
// that still answers a ping (or fails it otherwise) was open when the call
// failed, and the call's error was the server's answer.
func sessionClosed(ctx context.Context, s *mcp.ClientSession) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
	defer cancel()
	return errors.Is(s.Ping(ctx, nil), mcp.ErrConnectionClosed)
}

// refusal finds, anywhere in err's tree, a JSON-RPC error with a refusal
// code.
func refusal(err error) (string, bool) {
	switch e := err.(type) {
	case nil:
		return "", false
	case *jsonrpc.Error:
		code, ok := refusals[e.Code]
		return code, ok
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if code, ok := refusal(inner); ok {
				return code, true
			}
		}
	case interface{ Unwrap() error }:
		return refusal(e.Unwrap())
	}
	return "", false
}

// sendMark is put in the context of a tools/call: a connection of a
// transport wrapped by WatchWrites marks it when it begins to write the
// call, so that a call the SDK refused before writing it is told apart
// from one the server answered with a "closing" code.
type sendMark struct{ began atomic.Bool }

type sendMarkKey struct{}

// markSend returns ctx carrying a new sendMark, and the mark.
func markSend(ctx context.Context) (context.Context, *sendMark) {
	m := &sendMark{}
	return context.WithValue(ctx, sendMarkKey{}, m), m
}

// WatchWrites wraps t so that the calls of mcptool's tools on its sessions
// know whether they were written: the SDK answers mcp.ErrConnectionClosed
// both for a call it refused to write on a closing or broken connection
// and for a server's answer with a "closing" code, which a server may
// send after it acted. A tool whose sessions come from such transports —
// say so with [Sessions] that also implement WritesWatcher — answers the
// first as not sent (retried) and the second as unknown; without it, a
// call whose session fails a ping afterwards is taken for one refused
// before it was written, whatever the server did.
func WatchWrites(t mcp.Transport) mcp.Transport { return watchedTransport{t} }

// WritesWatcher is implemented by [Sessions] whose sessions' transports
// are all wrapped with [WatchWrites].
type WritesWatcher interface {
	WatchesWrites() bool
}

type watchedTransport struct{ mcp.Transport }

func (t watchedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return watchedConn{c}, nil
}

type watchedConn struct{ mcp.Connection }

func (c watchedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.ID.IsValid() {
		if m, ok := ctx.Value(sendMarkKey{}).(*sendMark); ok {
			m.began.Store(true)
		}
	}
	return c.Connection.Write(ctx, msg)
}
