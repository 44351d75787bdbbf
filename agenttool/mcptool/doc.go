// Package mcptool carries guarded tools over the Model Context Protocol,
// with the official Go SDK (github.com/modelcontextprotocol/go-sdk): a
// server serves an *agenttool.Tool ([Register]), and a client guards the
// tools an MCP server lists ([Tools], [NewTool]). agenttool itself does not
// import the SDK.
//
// # Basics
//
// Server: register a guarded tool on an *mcp.Server and serve it behind the
// SDK's bearer-token middleware. The principal of each call is the user of
// the request's verified token.
//
//	book, err := agenttool.New("book_flight", "Book one seat.", bookFlight, agenttool.Options{Store: store, Class: agenttool.Keyed})
//	server := mcp.NewServer(&mcp.Implementation{Name: "bookings", Version: "1.0.0"}, nil)
//	err = mcptool.Register(server, book, &mcptool.ServerOptions{Class: agenttool.Keyed})
//	handler := auth.RequireBearerToken(verifyToken, nil)(mcp.NewStreamableHTTPHandler(
//		func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true}))
//
// Every call goes through Tool.Invoke with the raw arguments, so retrysafe
// alone reads them (the SDK's raw handler validates nothing), and answers
// with the envelope as structured content and as text, isError set unless
// it is a success. The tool is listed with its real input schema, the
// envelope's schema as output schema, idempotentHint and, for a ReadOnly
// class, readOnlyHint.
//
// Client: guard the tools an MCP server lists, for a langchaingo agent or
// any caller of Invoke. Each gets the options you choose for it; the
// identifying fields default to the properties its input schema requires.
//
//	session, err := mcp.NewClient(impl, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
//	tools, err := mcptool.Tools(ctx, session, mcptool.ClientOptions{ByName: map[string]agenttool.Options{
//		"book_flight": {Store: store, Class: agenttool.Keyed},
//	}})
//	ctx = agenttool.WithScope(ctx, "tenant-42/user-7", "conversation-9")
//	env := tools[0].Invoke(ctx, `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`)
//
// A client call keeps what the server said: a retrysafe envelope's status
// (success with its result, unknown_outcome as unknown, definite_failure
// as definite with its code), other results and errors by what they prove
// (see [NewTool]). A result with isError from any other server is unknown:
// MCP reports every tool execution error so, a timeout after the tool
// acted as much as a refusal; ClientOptions.ToolErrors says otherwise for
// a server you know ([DefiniteToolErrors]). Class Keyed is for tools whose
// server answers with retrysafe envelopes, the only ones known to replay a
// resent call; over another server a write is AtMostOnce, or Reconcilable
// with a Reconciler of yours. The client's request reference travels in
// _meta under [MetaRequestRef], for the server's logs.
//
// # Where the scope comes from
//
// On the server, from trusted sources only, never from the arguments or
// _meta ([Caller] holds nothing of either): the principal is, by default,
// the UserID of the bearer token the SDK's middleware verified for this
// request ([TokenPrincipal]); the session is, by default, one per principal
// ([OneSession]), or what ServerOptions.Session says. A call without a
// principal answers missing_scope and runs nothing — also when the tool
// has a DefaultScope, unless ServerOptions.UseDefaultScope says otherwise,
// and whatever scope or action id the session's context carries.
//
// On the client, from the application, as for any guarded tool
// (agenttool.WithScope).
//
// # What a resend does
//
// A tools/call that arrives again with the same arguments from the same
// principal in the same session meets the key of the first: it is
// replayed (or waits while the first still runs), and the effect happens
// at most once. That covers a client resending after a broken stream, a
// client retrying after a timeout, a client that reconnected (the default
// session does not depend on the connection), and a handler the SDK runs
// more than once for one request. A guarded client of class Keyed resends
// by itself after an unknown outcome, with the same arguments.
//
// # Caveats
//
//   - Two guards, two keys. A guarded client keys an action by its own
//     scope in its own store; the server by its principal and session in
//     its store. The client's reference in _meta is informative only.
//   - A resend is replayed only if the server sees the same principal and
//     session. A session derived from the MCP session id changes when the
//     client reconnects (and stateless HTTP has none); the resend would be
//     a new action. The default, one session per principal, never makes
//     two actions of one, but makes two identical actions of a principal
//     one for as long as the store keeps it (agenttool.Options.KeyTTL).
//     idempotentHint holds within those bounds.
//   - readOnlyHint comes from ServerOptions.Class: an *agenttool.Tool does
//     not tell its class, so give the one the tool was built with.
//   - A tool handler's context carries the values of the context its MCP
//     session was connected with (for streamable HTTP, the request that
//     opened the session), not this request's; identity comes from the
//     request, through [Caller].
//   - The SDK reports HTTP statuses as text. To the client a 401, 403, 429
//     or 503 is then unknown; an http.RoundTripper of yours can return
//     errors marked with envelope.MarkDefinite or MarkTransient instead
//     (examples/mcp-agent does so for 401 and 403).
//   - The client takes mcp.ErrConnectionClosed to mean the call was not
//     sent (the SDK refuses calls on a closing connection before writing
//     them).
//   - A definite failure from the server reaches the client's model as
//     definite_failure with the server's code, next do_not_retry; the
//     server's next step (fix_input) and its earlier action are only in
//     the message. A server's definite failure that asks to wait
//     (unavailable) is transient to the client, so nothing is recorded.
//   - A wrapped tool's schema is {"type":"object"}; the client appends the
//     listed input schema to the description so that a model sees the
//     members.
//   - A connection that broke (in memory, stdio) stays broken: connect
//     again and build the tools on the new session with the same store;
//     actions whose outcome was unknown are resent and replayed.
package mcptool
