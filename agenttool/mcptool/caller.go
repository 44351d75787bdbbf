package mcptool

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Caller is what a server knows about the sender of one tools/call from
// trusted sources: the authentication middleware and the transport. It
// holds nothing from the call's arguments or _meta, which the client — and
// through it the model — writes. A Caller is a plain value, safe to copy;
// its Token and Header belong to the request and must not be changed.
type Caller struct {
	// Token is the request's bearer token as verified by the SDK's
	// middleware (auth.RequireBearerToken), or nil: over transports without
	// HTTP, or an HTTP handler without the middleware.
	Token *auth.TokenInfo
	// Header is the header of the HTTP request that carried the call, or
	// nil over other transports. Trust a header only if something you run
	// sets it (a gateway, your own client code), never a model.
	Header http.Header
	// SessionID is the MCP session id of the connection ("" when the
	// transport has none, as over stateless streamable HTTP). The server
	// makes it, and the SDK binds it to the token's user, so it is not
	// forged; but a client that reconnects gets a new one, and a call it
	// resends on the new session would be a new action. Use it as the
	// session only for clients that resend on the session they sent on.
	SessionID string
}

// callerOf reads the trusted parts of req.
func callerOf(req *mcp.CallToolRequest) Caller {
	var c Caller
	if req.Extra != nil {
		c.Token, c.Header = req.Extra.TokenInfo, req.Extra.Header
	}
	if req.Session != nil {
		c.SessionID = req.Session.ID()
	}
	return c
}

// TokenPrincipal is the default principal: the UserID of the request's
// verified bearer token, or "" (missing_scope) without one. Make the
// token verifier put the tenant into UserID ("tenant-42/user-7") when
// users of several tenants share the server.
func TokenPrincipal(_ context.Context, c Caller) (string, error) {
	if c.Token == nil {
		return "", nil
	}
	return c.Token.UserID, nil
}

// OneSession is the default session: every call of a principal is in the
// session "mcp". The same arguments from the same principal are then one
// action for as long as the store keeps it (agenttool.Options.KeyTTL), in
// whichever conversation or connection they arrive, and the unknown fence
// holds all of a principal's calls of the tool. It never turns one action
// into two; it can turn two identical actions of one principal into one,
// which the second call is told (it is replayed). Give a Session function
// that names the conversation when that matters.
//
// "mcp" is public, and so is any session that stays the same when a client
// reconnects and nothing secret goes into it: what keeps a guess of
// principal and arguments from being checked against a request reference
// is the tools' agenttool.Options.DigestKey (the reference is then keyed),
// not the session. Give every tool an MCP server serves a DigestKey.
func OneSession(context.Context, Caller) (string, error) { return "mcp", nil }
