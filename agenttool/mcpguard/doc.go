// Package mcpguard stands in front of any MCP server and gives its
// effectful tools retrysafe's promise — one effect per logical action, an
// envelope that never lies, an unknown outcome checked before anything is
// sent again — with no code on either side: the operator configures it.
// `retrysafe guard -config guard.json` runs it; a Go program can embed it.
//
//	cfg, err := mcpguard.LoadConfig("guard.json")
//	g, err := mcpguard.New(ctx, cfg, nil)
//	defer g.Close()
//	err = g.Server().Run(ctx, &mcp.StdioTransport{}) // a desktop client launches the guard in place of the server
//
// or, over streamable HTTP behind the configuration's bearer tokens and
// OAuth ([Guard.HTTPHandler]):
//
//	h, err := g.HTTPHandler()
//	err = http.ListenAndServe("127.0.0.1:8931", h)
//
// # The configuration
//
// The mcpServers block of a desktop client's configuration pastes in as
// it is; the guard's settings go in a tools map added to each server (see
// [Config], [Tool]). A tool is one of four classes:
//
//   - read_only: passed through untouched.
//   - keyed: the server takes an idempotency key in an argument
//     (key_argument, e.g. "idempotency_key"); the guard fills it with the
//     action's request reference and hides it from the schema the client
//     sees. A resend after an unknown outcome goes with the same key, and
//     the server answers the first outcome. "_meta" is for a server that
//     is itself a retrysafe server (mcptool.Register), which keys repeats
//     on its own. A server's idempotentHint is its word, not a key it
//     honours: it does not make a tool keyed.
//   - at_most_once: sent at most once; after an unknown outcome neither a
//     retry nor a reworded copy is sent until a person settles it
//     (`retrysafe resolve`).
//   - reconcilable: after an unknown outcome the guard calls the check, a
//     read-only tool of the same server, with the action's reference
//     (ref_argument names where the server keeps it), and reads the
//     answer: applied, not applied (one more attempt may go), or cannot
//     say yet.
//
// The identifying fields (what tells one action from another) default to
// the properties the tool's input schema requires. Tools the
// configuration does not name, at start or later (a server's
// notifications/tools/list_changed), are refused by default (the client
// does not see them); "default": "read_only" passes them through with a
// warning, and "default": {"class": ...} guards them all alike.
//
// A configuration error stops the guard at start with the field's path
// and the fix — also one only the server's listing shows: a tool it does
// not list, a key argument its schema lacks. A server that is down at
// start is tried again in the background; the tools the configuration
// names answer definite_failure unavailable (nothing sent) until it is up.
// A server over stdio whose process ends is started again by the next
// call that needs it. A guarded tool whose input schema the server
// changes while the guard runs is refused until the guard restarts: what
// makes its keys may have changed.
//
// # What the client gets
//
// Each guarded call answers with the server's own result on success, the
// retrysafe envelope in _meta under mcptool.MetaEnvelope; an unknown
// outcome or a definite failure answers with the envelope as text (and in
// _meta), isError set, saying what the model should do next. A call whose
// server reply was lost, timed out or broke after it was sent is unknown,
// never sent again blind. This departs on purpose from the rule of the
// 2026-07-28 MCP revision that a client re-issues a request whose stream
// broke: the guard is the one place that knows the first request may have
// acted, so it keys the resend (keyed), checks first (reconcilable), or
// holds it (at_most_once).
//
// # Who acts, and in which conversation
//
// The principal is the user of the request's verified bearer token over
// HTTP, or Config.Principal over stdio; a call without one runs nothing
// (missing_scope). A desktop client keeps one MCP session for all its
// chats, so by default every call of a principal is in one conversation:
// the unknown fence then holds one tool's writes of that user, one at a
// time, while one is unknown. Config.Conversation names a _meta key or an
// HTTP header where a client sends its conversation, to scope that per
// chat — never an argument, which the model writes.
//
// # Operators
//
// The guard's store is an ordinary retrysafe store: `retrysafe list`,
// `show` and `resolve` work on it, with the guard's tool names as the
// client sees them, each action labelled with the client's name and
// conversation (Options.Label).
package mcpguard
