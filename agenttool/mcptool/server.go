package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// ServerOptions configure a guarded tool served over MCP. A nil
// *ServerOptions means the defaults; every zero field takes the default in
// its comment. Register copies the options; changing them afterwards
// changes nothing. The functions in them are called concurrently, one call
// per tools/call, and must be safe for that.
type ServerOptions struct {
	// Class is the tool's side-effect class, as given to agenttool.New or
	// agenttool.Wrap. It only sets the readOnlyHint annotation (true for
	// agenttool.ReadOnly): an *agenttool.Tool does not tell its class, so
	// say the same class here. Zero means a tool with effects
	// (readOnlyHint false), which is the cautious answer.
	Class agenttool.Class
	// Annotations, if set, supply the tool's title, destructiveHint and
	// openWorldHint. Register sets idempotentHint (always true: a repeat
	// of a call with the same arguments, by the same principal in the same
	// session, is replayed) and readOnlyHint (from Class) itself.
	Annotations *mcp.ToolAnnotations
	// Principal says who acts, from what the server knows of the caller.
	// An empty principal, or an error, answers the call with missing_scope
	// and runs nothing; the error is logged, not sent. Default:
	// [TokenPrincipal], the UserID of the request's verified bearer token.
	//
	// ctx carries the values of the context the MCP session was connected
	// with (for streamable HTTP, the HTTP request that opened the session),
	// which need not be this request's: read per-request identity from the
	// Caller.
	Principal func(ctx context.Context, c Caller) (string, error)
	// Session says in which window the principal acts (a conversation, a
	// run), from what the server knows of the caller; the same arguments in
	// the same session are one action. An empty session, or an error,
	// answers missing_scope (the error is logged, not sent), also under
	// UseDefaultScope. Default: [OneSession], every call of a
	// principal in one session, so a resent tools/call is always replayed.
	//
	// Do not derive it from the MCP session id unless clients keep their
	// session across a resend: see [Caller.SessionID].
	Session func(ctx context.Context, c Caller) (string, error)
	// UseDefaultScope lets a call without a principal (Principal answered
	// "" without an error) run under the tool's
	// agenttool.Options.DefaultScope, if the tool has one. By default such
	// a call answers missing_scope whatever the tool's options say: an MCP
	// server is reached by many callers, and a default scope would make
	// their actions one principal's.
	UseDefaultScope bool
	// Logger receives warnings: a Principal or Session function that
	// failed. nil means discard.
	Logger *slog.Logger
	// Listing, if set, is the tool as the server lists it — name, title,
	// description, input and output schemas, annotations — in place of
	// the one Register makes from t: a guard in front of another MCP
	// server lists that server's tool (package mcpguard). A success then
	// answers with the whole result t returned, when t is a tool made by
	// [NewToolWith] with ToolOptions.WholeResult, and the envelope goes in
	// its _meta under [MetaEnvelope] (without the result it carries);
	// another outcome answers with the envelope as text and in _meta,
	// isError set, and no structured content when the listing declares
	// an output schema (which the envelope is not). Register sets
	// idempotentHint and readOnlyHint on a copy of it, as for any tool.
	// A call whose server asked for input answers with the server's
	// requests, where the client can answer them, and the client's
	// answers go to the server in its next round (ToolOptions.RelayInput).
	Listing *mcp.Tool
}

// MetaEnvelope is the _meta key under which a tool served with
// ServerOptions.Listing answers with its retrysafe envelope.
const MetaEnvelope = "io.github.retrysafe/envelope"

// Register adds t to server as an MCP tool whose every call goes through
// t.Invoke:
//
//   - its input schema is t.Schema() and its output schema the envelope's
//     ([envelope.Schema]);
//   - the raw "arguments" of each tools/call go to Invoke as they arrived:
//     retrysafe alone reads them, refuses malformed input and
//     model-supplied keys, and derives the action's key;
//   - the scope is the caller's principal and session, from trusted
//     sources only (see [ServerOptions]); never from the arguments or
//     _meta. Without a principal the call answers missing_scope and
//     nothing runs;
//   - the result carries the envelope as structured content and the same
//     JSON as text content, with isError set unless the status is success.
//
// A tools/call that arrives again with the same arguments (a client
// resending after a broken stream, a retry, a handler run twice) meets the
// first call's key and is replayed, or waits for it: the effect happens at
// most once.
//
// Register returns an error if the tool's schema is not a JSON object
// schema or opts.Class is not a class. Register replaces a tool of the same
// name, as mcp.Server.AddTool does.
func Register(server *mcp.Server, t *agenttool.Tool, opts *ServerOptions) error {
	if server == nil || t == nil {
		return errors.New("mcptool: Register needs a server and a tool")
	}
	var o ServerOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch o.Class {
	case 0, agenttool.ReadOnly, agenttool.Keyed, agenttool.Reconcilable, agenttool.AtMostOnce:
	default:
		return fmt.Errorf("mcptool: tool %q: unknown Class %v; give the class the tool was built with", t.Name(), o.Class)
	}
	var schema struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(t.Schema(), &schema); err != nil || schema.Type != "object" {
		return fmt.Errorf("mcptool: tool %q: its input schema must be a JSON object schema (\"type\": \"object\"), as MCP requires; got %s", t.Name(), t.Schema())
	}
	if o.Principal == nil {
		o.Principal = TokenPrincipal
	}
	if o.Session == nil {
		o.Session = OneSession
	}
	ann := mcp.ToolAnnotations{}
	if o.Annotations != nil {
		ann = *o.Annotations
	}
	ann.IdempotentHint = true
	ann.ReadOnlyHint = o.Class == agenttool.ReadOnly
	listing := &mcp.Tool{
		Name:         t.Name(),
		Description:  t.Description(),
		InputSchema:  t.Schema(),
		OutputSchema: json.RawMessage(envelope.Schema),
	}
	if o.Listing != nil {
		l := *o.Listing
		if l.Annotations != nil && opts.Annotations == nil {
			ann = *l.Annotations
			ann.IdempotentHint = true
			ann.ReadOnlyHint = o.Class == agenttool.ReadOnly
		}
		listing = &l
	}
	listing.Annotations = &ann
	server.AddTool(listing, serve(t, o))
	return nil
}

// serve is the raw tool handler of a guarded tool.
func serve(t *agenttool.Tool, o ServerOptions) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		caller := callerOf(req)
		principal, session, refusal := o.scope(ctx, t.Name(), caller)
		switch {
		case refusal == "":
			ctx = agenttool.WithScope(ctx, principal, session)
		case refusal == noPrincipal && o.UseDefaultScope:
			// An invalid scope: Invoke takes the tool's DefaultScope, or
			// answers missing_scope itself. A scope on the session's context
			// is never used.
			ctx = agenttool.WithScope(ctx, "", "")
		default:
			env := missingScope(t.Name(), refusal)
			if o.Listing != nil {
				return listedResult(env, o.Listing.OutputSchema != nil)
			}
			return toolResult(env)
		}
		// The action is told by the tool's identifying fields, never by an
		// action id that the session's context might carry: every call of
		// the session would otherwise be one action.
		ctx = agenttool.WithActionID(ctx, "")
		if o.Listing == nil {
			return toolResult(t.Invoke(ctx, string(req.Params.Arguments)))
		}
		ctx = withPassedMeta(ctx, req.Params.Meta) // for a tool with ToolOptions.PassMeta
		rl := &relay{tool: t.Name(), responses: req.Params.InputResponses, state: req.Params.RequestState}
		env := t.Invoke(withRelay(ctx, rl), string(req.Params.Arguments)) // for a tool with ToolOptions.RelayInput
		if res := rl.relayed(env, req); res != nil {
			return res, nil
		}
		return listedResult(env, o.Listing.OutputSchema != nil)
	}
}

// listedResult answers a tool served with ServerOptions.Listing: a
// success with the whole result its tool returned, the envelope in _meta;
// anything else with the envelope, as text and in _meta, and as
// structured content only where the listing declares no output schema.
func listedResult(env envelope.Envelope, declared bool) (*mcp.CallToolResult, error) {
	var res *mcp.CallToolResult
	if env.Status == envelope.Success {
		var whole mcp.CallToolResult
		if err := json.Unmarshal(env.Result, &whole); err == nil && (len(whole.Content) > 0 || whole.StructuredContent != nil) {
			res = &whole
		}
	}
	if res == nil {
		r, err := toolResult(env)
		if err != nil {
			return nil, err
		}
		if declared {
			r.StructuredContent = nil
		}
		res = r
	}
	told := env
	if env.Status == envelope.Success {
		told.Result = nil // the result is the answer itself
	}
	b, err := told.Marshal()
	if err != nil {
		return nil, fmt.Errorf("mcptool: tool %s returned an invalid envelope: %w", env.Tool, err)
	}
	if res.Meta == nil {
		res.Meta = mcp.Meta{}
	}
	res.Meta[MetaEnvelope] = json.RawMessage(b)
	return res, nil
}

// noPrincipal is the refusal of a call that has no principal: the only one
// a tool's DefaultScope may answer (ServerOptions.UseDefaultScope).
const noPrincipal = "the request carries no authenticated principal (no verified bearer token)"

// scope returns the call's principal and session, or why there is none.
func (o ServerOptions) scope(ctx context.Context, tool string, c Caller) (principal, session, refusal string) {
	principal, err := o.Principal(ctx, c)
	switch {
	case err != nil:
		o.Logger.Warn("mcptool: the caller's principal could not be determined; the call was refused", "tool", tool, "err", err)
		return "", "", "the server could not determine the caller's principal"
	case principal == "":
		return "", "", noPrincipal
	}
	session, err = o.Session(ctx, c)
	switch {
	case err != nil:
		o.Logger.Warn("mcptool: the caller's session could not be determined; the call was refused", "tool", tool, "err", err)
		return "", "", "the server could not determine the caller's session"
	case session == "":
		return "", "", "the server could not tell the caller's session"
	}
	return principal, session, ""
}

// missingScope is the envelope of a call refused for want of a principal or
// a session, as agenttool answers one.
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
func toolResult(env envelope.Envelope) (*mcp.CallToolResult, error) {
	b, err := env.Marshal()
	if err != nil {
		// Invoke returns valid envelopes; an invalid one is not sent as if
		// it were an outcome. The client reads an internal error: unknown.
		return nil, fmt.Errorf("mcptool: tool %s returned an invalid envelope: %w", env.Tool, err)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
		StructuredContent: json.RawMessage(b),
		IsError:           env.Status != envelope.Success,
	}, nil
}
