package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// MetaRequestRef is the _meta key under which a tool made by [NewTool]
// sends the request reference of its call (agenttool.RequestRef). It is
// informative only — for logs and tracing on the server side. A server made
// with [Register] never takes a key, a scope or anything else from _meta.
const MetaRequestRef = "io.github.retrysafe/request_ref"

// ClientOptions choose which tools of an MCP server [Tools] guards, and
// with which agenttool.Options. Tools reads them once, and calls Choose
// from its own goroutine only.
type ClientOptions struct {
	// ByName gives the options of tools by name. A tool it names that the
	// server does not list is an error.
	ByName map[string]agenttool.Options
	// Choose gives the options of a listed tool that ByName does not name;
	// ok false leaves the tool out. nil leaves out every tool ByName does
	// not name.
	Choose func(t *mcp.Tool) (opts agenttool.Options, ok bool)
	// ToolErrors says what a result with isError means for the effect,
	// for every guarded tool (see [ToolErrors]); nil reads every such
	// result as unknown.
	ToolErrors ToolErrors
}

// ToolErrors says what a result with isError, which is not a retrysafe
// envelope, means for the effect of a call of tool t: envelope.Definite
// if the tool changed nothing (a refusal, invalid input), Transient if it
// changed nothing and asks to be tried later, Unknown if it may have acted.
// It runs once per such result, on the call's goroutine.
//
// The MCP specification reports every tool execution error with isError,
// and the Go SDK's typed handlers turn every error they return into one —
// a downstream timeout after the booking committed as much as "no such
// flight". A result with isError is therefore unknown unless you know the
// server: [DefiniteToolErrors] is for a server whose tools report isError
// only when they did nothing.
type ToolErrors func(t *mcp.Tool, res *mcp.CallToolResult) envelope.Class

// DefiniteToolErrors is the [ToolErrors] of a server whose tools answer
// isError only for calls that changed nothing: every such result is a
// definite failure, code rejected, with the result's text.
func DefiniteToolErrors(*mcp.Tool, *mcp.CallToolResult) envelope.Class { return envelope.Definite }

// Tools lists the tools of the MCP server at the other end of session and
// guards each one that opts choose, with [NewTool]. The tools come in the
// server's order. Tools returns an error if the listing fails, if ByName
// names a tool the server does not list, or if a chosen tool cannot be
// guarded (the error names it).
func Tools(ctx context.Context, session *mcp.ClientSession, opts ClientOptions) ([]*agenttool.Tool, error) {
	var out []*agenttool.Tool
	seen := map[string]bool{}
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("mcptool: listing the server's tools: %w", err)
		}
		if seen[t.Name] {
			// A listing that repeats itself would never end.
			return nil, fmt.Errorf("mcptool: the server lists the tool %q twice; its listing is not usable", t.Name)
		}
		seen[t.Name] = true
		o, ok := opts.ByName[t.Name]
		if !ok && opts.Choose != nil {
			o, ok = opts.Choose(t)
		}
		if !ok {
			continue
		}
		g, err := NewTool(session, t, o, opts.ToolErrors)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	for _, name := range slices.Sorted(maps.Keys(opts.ByName)) {
		if !seen[name] {
			return nil, fmt.Errorf("mcptool: ClientOptions.ByName names %q, but the server lists no such tool", name)
		}
	}
	return out, nil
}

// NewTool guards t, a tool listed by the MCP server at the other end of
// session, with agenttool.Wrap: each call claims its key in opts.Store
// and calls session.CallTool with the canonical arguments, the request
// reference in _meta under [MetaRequestRef]. The returned tool is safe for
// concurrent use as long as session is.
//
// If opts.IdentifyingFields is empty they default to the properties t's
// input schema marks required; a tool whose schema requires none is
// refused (wrapping agenttool.ErrInvalidOptions) unless its class is
// ReadOnly, because retrysafe could not tell one action from another.
// opts.TextInput is refused: MCP arguments are JSON objects. Class Keyed
// is refused for a tool that does not answer with retrysafe envelopes (a
// server made with [Register] declares the envelope's output schema):
// only such a server is known to replay a resent call rather than run it
// again; the request reference in _meta is informative only.
//
// What a call's outcome means to the guarded tool:
//
//   - a result that carries a retrysafe envelope (a server made with
//     [Register]) keeps its status: success gives its result;
//     unknown_outcome stays unknown; definite_failure is definite with its
//     code, except one whose next step is wait (the server did nothing and
//     asks to try later), which is transient;
//   - another result with isError is what toolErrors says it is, unknown
//     if toolErrors is nil (see [ToolErrors]);
//   - another result is a success, whose result is the structured content,
//     or the text;
//   - the JSON-RPC errors method-not-found, invalid-params, invalid-request
//     and parse-error, and the SDK's refusals of a request's headers,
//     capabilities or protocol version, are definite: the server refused
//     the call before any tool ran;
//   - a call the connection refused before sending it (a closed session,
//     mcp.ErrConnectionClosed) or a failed dial is transient;
//   - anything else — a deadline after sending, a lost stream, an internal
//     error, an HTTP status the SDK reports as text — is unknown, unless an
//     error in its chain carries its own class (envelope.MarkDefinite and
//     the others, from an http.RoundTripper of yours, say).
func NewTool(session *mcp.ClientSession, t *mcp.Tool, opts agenttool.Options, toolErrors ToolErrors) (*agenttool.Tool, error) {
	if session == nil || t == nil {
		return nil, fmt.Errorf("mcptool: NewTool needs a client session and a listed tool: %w", agenttool.ErrInvalidOptions)
	}
	if opts.TextInput {
		return nil, fmt.Errorf("mcptool: tool %q: TextInput is for tools that take plain text; MCP tools take a JSON object: %w", t.Name, agenttool.ErrInvalidOptions)
	}
	schema, err := inputSchema(t)
	if err != nil {
		return nil, fmt.Errorf("mcptool: tool %q: %w: %w", t.Name, err, agenttool.ErrInvalidOptions)
	}
	envelopes := servesEnvelopes(t)
	if opts.Class == agenttool.Keyed && !envelopes {
		return nil, fmt.Errorf("mcptool: tool %q: class Keyed says its server applies a resent call at most once, but the tool does not answer "+
			"with retrysafe envelopes (its output schema is not the envelope's), so nothing says that its server dedupes resent calls; "+
			"use AtMostOnce, or Reconcilable with a Reconciler that asks the server: %w", t.Name, agenttool.ErrInvalidOptions)
	}
	if len(opts.IdentifyingFields) == 0 && opts.Class != agenttool.ReadOnly {
		if len(schema.Required) == 0 {
			return nil, fmt.Errorf("mcptool: tool %q: its input schema marks no property required, so retrysafe cannot tell one action from another; "+
				"name the input members that do in its options' IdentifyingFields: %w", t.Name, agenttool.ErrInvalidOptions)
		}
		opts.IdentifyingFields = slices.Clone(schema.Required)
	}
	return agenttool.Wrap(&remote{session: session, tool: t, name: t.Name, description: describe(t.Description, schema.raw),
		envelopes: envelopes, toolErrors: toolErrors}, opts)
}

// remote is a listed MCP tool as an agenttool.Callable.
type remote struct {
	session     *mcp.ClientSession
	tool        *mcp.Tool // as listed
	name        string
	description string
	envelopes   bool // its output schema is the envelope's: it answers with retrysafe envelopes
	toolErrors  ToolErrors
}

// servesEnvelopes reports whether a listed tool declares the envelope's
// schema as its output schema, as a tool served by [Register] does. Only
// such a tool's results are read as envelopes: any other tool's output may
// hold text the model wrote, which must never pass for an outcome.
func servesEnvelopes(t *mcp.Tool) bool {
	var declared, ours struct {
		ID string `json:"$id"`
	}
	b, err := json.Marshal(t.OutputSchema)
	if err != nil || json.Unmarshal(b, &declared) != nil || json.Unmarshal(envelope.Schema, &ours) != nil {
		return false
	}
	return declared.ID != "" && declared.ID == ours.ID
}

func (r *remote) Name() string        { return r.name }
func (r *remote) Description() string { return r.description }

// Call sends one tools/call with input, the canonical JSON object that
// agenttool digested, and returns the result as text, or an error with
// its class.
func (r *remote) Call(ctx context.Context, input string) (string, error) {
	params := &mcp.CallToolParams{Name: r.name, Arguments: json.RawMessage(input)}
	if ref := agenttool.RequestRef(ctx); ref != "" {
		params.Meta = mcp.Meta{MetaRequestRef: ref}
	}
	res, err := r.session.CallTool(ctx, params)
	if err != nil {
		return "", classifyCallError(err)
	}
	return r.readResult(ctx, res)
}

// toolSchema is what NewTool reads of a listed tool's input schema.
type toolSchema struct {
	Type     any      `json:"type"`
	Required []string `json:"required"`
	raw      []byte   // the schema, compact
}

func inputSchema(t *mcp.Tool) (toolSchema, error) {
	var s toolSchema
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return s, fmt.Errorf("its input schema cannot be read: %w", err)
	}
	if err := json.Unmarshal(raw, &s); err != nil || s.Type != "object" {
		return s, fmt.Errorf("its input schema is not a JSON object schema: %s", raw)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		s.raw = buf.Bytes()
	}
	return s, nil
}

// describe is the description the model reads: the server's, without the
// envelope hint a retrysafe server already added (Wrap adds it again), and
// the input schema. A wrapped tool's Schema is {"type":"object"}, so a
// function-calling model would otherwise not see the members.
func describe(desc string, schema []byte) string {
	desc = strings.TrimSuffix(desc, agenttool.EnvelopeHint)
	if bytes.Contains(schema, []byte(`"properties"`)) {
		desc = strings.TrimSpace(desc) + " Input: a JSON object with this JSON Schema: " + string(schema) + "."
	}
	return desc
}
