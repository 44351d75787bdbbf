// Package mcpgo serves guarded tools with mcp-go
// (github.com/mark3labs/mcp-go), the most used Go MCP server library: a
// guarded tool registered on a server ([Register], or [Handler] for a
// server.ToolHandlerFunc), or the tools a server already has, guarded
// through its tool handler middleware ([Guard]). agenttool itself does not
// import mcp-go; agenttool/mcptool does the same for the official Go SDK,
// and this package makes the same choices.
//
// # Basics
//
// Register a guarded tool, and put the scope on each request's context
// from what your authentication verified:
//
//	s := server.NewMCPServer("mail", "1.0.0")
//	err := mcpgo.Register(s, send, &mcpgo.Options{Class: agenttool.Keyed})
//	handler := server.NewStreamableHTTPServer(s, server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
//		return agenttool.WithScope(ctx, verifiedUser(r), "mcp") // from your token check, never from the arguments
//	}))
//
// Or guard tools the server already has, by name:
//
//	guard, err := mcpgo.NewGuard(map[string]agenttool.Options{
//		"send_email": {Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"to", "subject", "body"}},
//	}, nil)
//	s := server.NewMCPServer("mail", "1.0.0", server.WithToolHandlerMiddleware(guard.Middleware()))
//
// Every call goes through Tool.Invoke with the raw arguments, so
// retrysafe alone reads them, and answers with the envelope as structured
// content and as text, isError set unless it is a success; the handler
// never returns an error, which mcp-go would send as a JSON-RPC error
// that tells the client nothing of the outcome. A registered tool is
// listed with its real input schema, the envelope's schema as output
// schema, idempotentHint and, for a ReadOnly class, readOnlyHint.
//
// # Where the scope comes from
//
// From trusted sources only, never from the arguments or _meta ([Caller]
// holds nothing of either): by default the scope the application put on
// the context — agenttool.WithScope in the server's HTTPContextFunc, after
// it verified the request, or in its StdioContextFunc for a local
// server. [Options].Principal and Session choose otherwise (a header your
// gateway sets, [OneSession]). A call without a principal answers
// missing_scope and runs nothing — also when the tool has a DefaultScope,
// unless [Options].UseDefaultScope says otherwise — and an action id on
// the server's context is never used.
//
// # What a resend does
//
// A tools/call that arrives again with the same arguments from the same
// principal in the same session meets the key of the first: it is
// replayed (or waits while the first still runs), and the effect happens
// at most once. Calls of different actions of one tool in one session,
// however many arrive at once, run one after the other: a second waits
// for the first and is held by the unknown fence if the first ends
// unknown.
//
// # Caveats
//
//   - A guarded handler's isError is unknown by default: MCP reports every
//     tool execution error so, a timeout after the tool acted as much as
//     a refusal. [Options].ToolErrors says otherwise for handlers you know
//     ([DefiniteToolErrors]).
//   - mcp-go's tools/list still shows a guarded handler's own description
//     and schema: add agenttool.EnvelopeHint to its description.
//   - Guard a tool once: a tool both registered with [Register] and named
//     in a [Guard] would be guarded twice, under two keys.
//   - mcp-go's WithInputSchemaValidation validates arguments before any
//     middleware runs: a call it refuses never reaches retrysafe (nothing
//     runs, and the answer is mcp-go's own).
package mcpgo
