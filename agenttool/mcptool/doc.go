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
// about the action (see "What a call proves" below). A result with isError
// from any other server is unknown: MCP reports every tool execution error
// so, a timeout after the tool acted as much as a refusal;
// ClientOptions.ToolErrors says otherwise for a server you know
// ([DefiniteToolErrors]). Class Keyed is for tools whose server answers
// with retrysafe envelopes, the only ones known to replay a resent call;
// over another server a write is AtMostOnce, or Reconcilable with a
// Reconciler of yours. The client's request reference travels in _meta
// under [MetaRequestRef], for the server's logs. ClientOptions.Reconnect
// lets the tools connect again when their session is lost.
//
// # What a call proves
//
// Between the client and the server there may be a proxy that delivers one
// tools/call twice, or again after its own timeout, or that fails over to
// a replica which does not know the MCP session. An answer to one delivery
// then says nothing of another: the client classes each outcome by what it
// proves about the action. A definite failure frees the action (the model
// may send it again, reworded), so it is kept for what proves that no tool
// ran for any copy of the request; everything else that may have reached
// a tool is unknown, and the unknown fence holds the model's next write.
//
//	what the client got                          server      class
//	a result carrying a retrysafe envelope       retrysafe   the envelope's status (1)
//	a result with isError                        plain       ToolErrors, or unknown (2)
//	a result without isError                     plain       success
//	a result that asks for input (12)            any         definite, input_required
//	JSON-RPC parse error, method not found,      retrysafe   definite (3)
//	invalid params, header mismatch, missing
//	client capabilities, unsupported protocol
//	version, in the answer to the call
//	the same codes                               plain       unknown (4)
//	JSON-RPC invalid request                     any         unknown (5)
//	any JSON-RPC code with an HTTP error status  any         unknown (6)
//	any other JSON-RPC error                     any         unknown
//	an HTTP error status without JSON-RPC        any         unknown (7)
//	404 "session not found"                      any         unknown; Keyed resends (8)
//	mcp.ErrConnectionClosed, the call unwritten  any         transient (9)
//	mcp.ErrConnectionClosed, the call written    any         unknown (9)
//	a failed dial, a failed Reconnect            any         transient (10)
//	a deadline, a lost stream, anything else     any         unknown (11)
//
// "retrysafe" is a server whose tool answers with retrysafe envelopes (its
// output schema is the envelope's, as with [Register]); "plain" is any
// other. The reasons:
//
//  1. A retrysafe server keys the action by its principal, session and
//     arguments, which every copy of a request shares: a copy that comes
//     while another runs waits for it, one that comes later is replayed.
//     Its envelope is about the action. A definite failure that asks to
//     wait (unavailable, store_unavailable) says that the server did
//     nothing and holds nothing for the action: transient, and the retry
//     goes with the same key. A replayed success says replayed only when
//     this tool saw the action done for another of its calls before (see
//     below).
//  2. MCP reports every tool execution error with isError, and the SDK's
//     typed handlers turn every error they return into one.
//  3. A retrysafe server's tool never answers with a JSON-RPC error, so
//     the SDK refused the request before dispatching it, for a reason in
//     the request itself (a tool it does not have, say) that every copy
//     meets.
//  4. The SDK passes a *jsonrpc.Error returned by a typed handler straight
//     through as the call's error, whatever its code and however much the
//     handler did before: no code proves that nothing ran.
//  5. The SDK answers invalid request to a copy of a request whose id is
//     in flight on the session ("duplicate in-flight request ID", HTTP
//     400): the copy before it is running.
//  6. The SDK's transports carry a code from the body of an HTTP error
//     status (wrapped in its "rejected by transport"): the transport
//     refused that delivery, and another copy may have run. From protocol
//     version 2026-07-28 on, a handler's invalid params comes as HTTP 400
//     too.
//  7. A proxy or gateway may answer 429, 502, 503 or 504 after it forwarded
//     the request. An http.RoundTripper of yours may mark what it knows
//     (envelope.MarkDefinite, MarkTransient): marks are kept.
//  8. The server had no live session for this delivery; a copy may have
//     reached the session before it ended (a proxy's retry after a restart
//     or a failover). A Keyed tool resends under its key, on a new session
//     if ClientOptions.Reconnect gives one, and the server runs the action
//     once or replays it.
//  9. The SDK says connection closed of a call it refused to write on a
//     closing or broken connection, and also of a server's answer with
//     the "server is closing" or "client is closing" codes, which a
//     handler may return after it acted. On sessions whose transport is
//     wrapped by [WatchWrites] (their [Sessions] say so: [WritesWatcher],
//     as retrysafe guard's do), the call knows whether it was written.
//     On others, a closed connection never opening again, the client
//     pings the session, and a ping that fails as connection closed too
//     is taken to prove that the call was not sent.
//  10. Nothing was sent.
//  11. The request may have been delivered and run; only an answer tells.
//     With ToolOptions.LateWindow, a call whose attempt reached its
//     deadline is not cancelled at the server then: the client goes on
//     listening, and an answer that comes within the window reaches
//     ToolOptions.Late, which [SettleLate] turns into a settlement of the
//     action (applied with the result, or not applied).
//  12. A multi-round-trip result (the 2026-07-28 revision): the server
//     ended the request to ask the client for input (an elicitation, a
//     sampling or a roots request) and acts only in a later round that
//     carries the answers. The SDK's client answers it by itself when the
//     client has handlers for what is asked, and the call goes on; when
//     it hands the result back (mcp.MultiRoundTripOptions.Disabled), the
//     call did nothing ([CodeInputRequired]): its key is given back, so
//     that the round that carries the answers is the same action
//     (agenttool.ErrAwaitsInput), and a front relays the question
//     (ToolOptions.RelayInput). Without the handlers, the SDK's attempt
//     fails after the server's answer, and that reads as unknown: give
//     the client the handlers, or turn the handling off.
//
// A replayed success of a retrysafe server says that the action was done
// for an earlier request. It may be a copy of this call's own request,
// delivered twice by a proxy, whose first answer was lost: the client's
// envelope says replayed only when this tool, in this process, saw a
// success for that action come back to another of its calls before this
// call was sent; otherwise it is an ordinary success.
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
//   - A proxy that resends a call on its own (after its timeout, or to a
//     replica without the session) makes two effects on a server that does
//     not dedupe: the client's key never reaches a plain server's tool. Only
//     the server can hold that line (a retrysafe one does).
//   - On a session not watched by [WatchWrites], a handler that returns
//     "server is closing" after it acted, on a connection that breaks
//     before the client's ping, reads as unsent.
//   - A copy of a request that a proxy holds back and delivers only after
//     the client has given up on it (every retry answered unavailable by
//     the server) runs after the client said definite_failure unavailable.
//     No answer of the server can tell of a copy it has not received yet.
//   - A Keyed resend after a lost session goes on a new MCP session: it is
//     replayed only if the server's session does not follow the MCP session
//     id (ServerOptions.Session; the default, [OneSession], does not).
//   - A definite failure from the server reaches the client's model as
//     definite_failure with the server's code, next do_not_retry; the
//     server's next step (fix_input) and its earlier action are only in
//     the message. A server's definite failure that asks to wait
//     (unavailable) is transient to the client, so nothing is recorded.
//   - A wrapped tool's schema is {"type":"object"}; the client appends the
//     listed input schema to the description so that a model sees the
//     members.
//   - A client that gives up on a call sends notifications/cancelled (the
//     TypeScript SDK does after 60 s by default): the handler's context
//     ends, and a guarded tool whose attempt it was answers unknown — for
//     an AtMostOnce tool, its fence then holds the user's next writes of
//     the tool until a person settles it. A tool that knows it did
//     nothing when its context ended returns a definite or transient
//     error (envelope.MarkDefinite, MarkTransient), not ctx.Err().
//   - A tool's idempotentHint is its server's word: nothing checks it, and
//     it is false by default. Keyed is for a server that answers with
//     retrysafe envelopes or takes an idempotency key (ToolOptions.RefArgument),
//     never for a hint.
//   - A connection that broke (in memory, stdio) stays broken: connect
//     again (ClientOptions.Reconnect does it for you) or build the tools
//     on a new session with the same store; actions whose outcome was
//     unknown are resent and replayed.
package mcptool
