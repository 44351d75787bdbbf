package mcpgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// Options configure guarded tools served by an mcp-go server. A nil
// *Options means the defaults; every zero field takes the default in its
// comment. The functions in them are called concurrently, one call per
// tools/call, and must be safe for that.
type Options struct {
	// Class is the tool's side-effect class, as given to agenttool.New or
	// agenttool.Wrap. It only sets the readOnlyHint annotation (true for
	// agenttool.ReadOnly): an *agenttool.Tool does not tell its class, so
	// say the same class here. Zero means a tool with effects.
	Class agenttool.Class
	// Annotations, if set, supply the tool's title, destructiveHint and
	// openWorldHint. Register sets idempotentHint (always true: a repeat of
	// a call with the same arguments, by the same principal in the same
	// session, is replayed) and readOnlyHint (from Class) itself.
	Annotations *mcp.ToolAnnotation
	// Principal says who acts, from trusted sources only. An empty
	// principal, or an error, answers the call with missing_scope and runs
	// nothing; the error is logged, not sent. Default: [ContextPrincipal],
	// the principal of the scope the application put on the context
	// (agenttool.WithScope in the server's HTTPContextFunc, after it
	// verified the request's credentials, or in its StdioContextFunc).
	Principal func(ctx context.Context, c Caller) (string, error)
	// Session says in which window the principal acts; the same arguments
	// in the same session are one action. An empty session, or an error,
	// answers missing_scope. Default: [ContextSession], the session of
	// the scope on the context.
	Session func(ctx context.Context, c Caller) (string, error)
	// UseDefaultScope lets a call without a principal run under the tool's
	// agenttool.Options.DefaultScope, if it has one. By default such a
	// call answers missing_scope whatever the tool's options say: an MCP
	// server is reached by many callers, and a default scope would make
	// their actions one principal's.
	UseDefaultScope bool
	// ToolErrors says, for [Middleware], what a result with isError from a
	// guarded handler means for the effect: envelope.Definite if the
	// handler changed nothing, Transient if it changed nothing and asks to
	// be tried later, Unknown if it may have acted. Default: every such
	// result is unknown, as the MCP specification reports every tool
	// execution error so. [DefiniteToolErrors] is for handlers that
	// answer isError only when they did nothing.
	ToolErrors func(res *mcp.CallToolResult) envelope.Class
	// Logger receives warnings: a Principal or Session function that
	// failed. nil means discard.
	Logger *slog.Logger
}

// DefiniteToolErrors is the ToolErrors of handlers that answer isError
// only for calls that changed nothing.
func DefiniteToolErrors(*mcp.CallToolResult) envelope.Class { return envelope.Definite }

// Caller is what a server knows about the sender of one tools/call from
// the transport. It holds nothing from the call's arguments or _meta,
// which the client — and through it the model — writes.
type Caller struct {
	// Header is the header of the HTTP request that carried the call, or
	// nil over stdio. Trust a header only if something you run sets it (a
	// gateway, your own client code), never a model.
	Header http.Header
	// SessionID is the MCP session id of the connection, or "". A client
	// that reconnects gets a new one: use it as the session only for
	// clients that resend on the session they sent on.
	SessionID string
}

func callerOf(ctx context.Context, req mcp.CallToolRequest) Caller {
	c := Caller{Header: req.Header}
	if s := server.ClientSessionFromContext(ctx); s != nil {
		c.SessionID = s.SessionID()
	}
	return c
}

// ContextPrincipal is the default principal: that of the scope the
// application put on the context (agenttool.WithScope), or "".
func ContextPrincipal(ctx context.Context, _ Caller) (string, error) {
	s, _ := agenttool.ScopeFrom(ctx)
	return s.Principal, nil
}

// ContextSession is the default session: that of the scope the
// application put on the context (agenttool.WithScope), or "".
func ContextSession(ctx context.Context, _ Caller) (string, error) {
	s, _ := agenttool.ScopeFrom(ctx)
	return s.Session, nil
}

// OneSession makes every call of a principal one session, "mcp": the same
// arguments from the same principal are then one action for as long as the
// store keeps it, in whichever conversation or connection they arrive.
func OneSession(context.Context, Caller) (string, error) { return "mcp", nil }

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Principal == nil {
		out.Principal = ContextPrincipal
	}
	if out.Session == nil {
		out.Session = ContextSession
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

// Register adds t to s as an MCP tool whose every call goes through
// t.Invoke ([Handler]): listed with its real input schema, the
// envelope's schema as output schema, idempotentHint and, for a ReadOnly
// class, readOnlyHint. It returns an error if the tool's schema is not a
// JSON object schema or opts.Class is not a class. It replaces a tool of
// the same name, as server.MCPServer.AddTool does.
func Register(s *server.MCPServer, t *agenttool.Tool, opts *Options) error {
	if s == nil || t == nil {
		return errors.New("mcpgo: Register needs a server and a tool")
	}
	o := opts.withDefaults()
	if err := checkClass(t.Name(), o.Class); err != nil {
		return err
	}
	var schema struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(t.Schema(), &schema); err != nil || schema.Type != "object" {
		return fmt.Errorf("mcpgo: tool %q: its input schema must be a JSON object schema (\"type\": \"object\"), as MCP requires; got %s", t.Name(), t.Schema())
	}
	tool := mcp.NewToolWithRawSchema(t.Name(), t.Description(), t.Schema())
	tool.RawOutputSchema = json.RawMessage(envelope.Schema)
	if o.Annotations != nil {
		tool.Annotations = *o.Annotations
	}
	yes, readOnly := true, o.Class == agenttool.ReadOnly
	tool.Annotations.IdempotentHint = &yes
	tool.Annotations.ReadOnlyHint = &readOnly
	s.AddTool(tool, handler(t, o))
	return nil
}

func checkClass(name string, c agenttool.Class) error {
	switch c {
	case 0, agenttool.ReadOnly, agenttool.Keyed, agenttool.Reconcilable, agenttool.AtMostOnce:
		return nil
	}
	return fmt.Errorf("mcpgo: tool %q: unknown Class %v; give the class the tool was built with", name, c)
}

// Handler returns an mcp-go tool handler that runs each call through
// t.Invoke:
//
//   - the raw "arguments" of each tools/call go to Invoke as they arrived:
//     retrysafe alone reads them, refuses malformed input and
//     model-supplied keys, and derives the action's key;
//   - the scope is the caller's principal and session, from trusted
//     sources only (see [Options]); never from the arguments or _meta.
//     Without them the call answers missing_scope and nothing runs;
//   - the result carries the envelope as structured content and the same
//     JSON as text content, with isError set unless the status is
//     success. The handler never returns an error: mcp-go would send a
//     JSON-RPC error, which tells the client nothing of the outcome.
func Handler(t *agenttool.Tool, opts *Options) server.ToolHandlerFunc {
	return handler(t, opts.withDefaults())
}

func handler(t *agenttool.Tool, o Options) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx, refused := o.scoped(ctx, t.Name(), req)
		if refused != nil {
			return toolResult(*refused), nil
		}
		return toolResult(t.Invoke(ctx, rawArguments(req))), nil
	}
}

// scoped returns ctx with the call's scope, and no action id: the action
// is told by the tool's identifying fields, never by an action id the
// server's context might carry (every call would otherwise be one
// action). Without a scope it returns the envelope that refuses the call.
func (o Options) scoped(ctx context.Context, tool string, req mcp.CallToolRequest) (context.Context, *envelope.Envelope) {
	principal, session, refusal := o.scope(ctx, tool, callerOf(ctx, req))
	switch {
	case refusal == "":
		ctx = agenttool.WithScope(ctx, principal, session)
	case refusal == noPrincipal && o.UseDefaultScope:
		// An invalid scope: Invoke takes the tool's DefaultScope, or
		// answers missing_scope itself.
		ctx = agenttool.WithScope(ctx, "", "")
	default:
		env := missingScope(tool, refusal)
		return nil, &env
	}
	return agenttool.WithActionID(ctx, ""), nil
}

// rawArguments returns the arguments as they arrived: the raw JSON of a
// request read from the wire, or the arguments a caller in the same
// process set, encoded.
func rawArguments(req mcp.CallToolRequest) string {
	if len(req.Params.RawArguments) > 0 {
		return string(req.Params.RawArguments)
	}
	if req.Params.Arguments == nil {
		return ""
	}
	b, err := json.Marshal(req.Params.Arguments)
	if err != nil {
		return ""
	}
	return string(b)
}

const noPrincipal = "the request carries no principal (no scope on the server's context)"

func (o Options) scope(ctx context.Context, tool string, c Caller) (principal, session, refusal string) {
	principal, err := o.Principal(ctx, c)
	switch {
	case err != nil:
		o.Logger.Warn("mcpgo: the caller's principal could not be determined; the call was refused", "tool", tool, "err", err)
		return "", "", "the server could not determine the caller's principal"
	case principal == "":
		return "", "", noPrincipal
	}
	session, err = o.Session(ctx, c)
	switch {
	case err != nil:
		o.Logger.Warn("mcpgo: the caller's session could not be determined; the call was refused", "tool", tool, "err", err)
		return "", "", "the server could not determine the caller's session"
	case session == "":
		return "", "", "the server could not tell the caller's session"
	}
	return principal, session, ""
}

func missingScope(tool, why string) envelope.Envelope {
	return envelope.Envelope{
		Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: tool,
		Error: &envelope.Error{Code: envelope.CodeMissingScope, Message: why + "; nothing was run"},
		Next:  envelope.DoNotRetry,
		Note:  "This tool is not available without an authenticated user; tell the user it could not be used.",
	}
}

// toolResult carries env as a tools/call result: structured content, the
// same JSON as text, and isError unless it is a success.
func toolResult(env envelope.Envelope) *mcp.CallToolResult {
	b, err := env.Marshal()
	if err != nil {
		// Invoke returns valid envelopes; should one not be, the client
		// reads an unknown outcome rather than a made-up one.
		b, _ = envelope.Envelope{Version: envelope.Version, Status: envelope.UnknownOutcome, Tool: env.Tool, RequestRef: env.RequestRef,
			Error: &envelope.Error{Code: envelope.CodeOutcomeUnknown, Message: "the tool's answer could not be encoded; the action may have happened"},
			Next:  envelope.DoNotRetry}.Marshal()
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewTextContent(string(b))},
		StructuredContent: json.RawMessage(b),
		IsError:           env.Status != envelope.Success,
	}
}
