package mcptool

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
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
	// Reconnect, if set, connects a new client session to the same server
	// (as the application connected the first). The tools call it, on the
	// goroutine of the call that needs it and one call at a time, once the
	// session they share is lost: closed before a call was sent, or
	// forgotten by its server (HTTP 404 "session not found", after a
	// restart or a failover). The call goes on the new session; the tools
	// close the session they replace, and the sessions Reconnect returns
	// are the application's to close when it is done. An error from
	// Reconnect fails that call as unsent (transient). nil keeps the first
	// session: once lost, every call on it fails, and the application
	// connects again and builds the tools anew with the same store.
	//
	// A new session does not make an unknown outcome known: what a call
	// sent before the loss stays unknown, and only a class Keyed tool
	// resends it (see [NewTool]), which its server replays as long as its
	// session does not follow the MCP session id (ServerOptions.Session).
	Reconnect func(ctx context.Context) (*mcp.ClientSession, error)
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
	if session == nil {
		return nil, fmt.Errorf("mcptool: Tools needs a client session: %w", agenttool.ErrInvalidOptions)
	}
	shared := &link{session: session, reconnect: opts.Reconnect}
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
		g, err := newTool(shared, t, o, ToolOptions{ToolErrors: opts.ToolErrors})
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
// concurrent use as long as session is. It never connects again: a tool
// that should goes through [Tools] with ClientOptions.Reconnect.
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
// A call's outcome is classed by what it proves about the action, not
// about one delivery of it: a proxy may deliver a request twice, or again
// after its own timeout, so an answer that refuses one delivery says
// nothing of another. The package documentation has the whole table; in
// short:
//
//   - a result that carries a retrysafe envelope (a server made with
//     [Register]) keeps its status: success gives its result;
//     unknown_outcome stays unknown; definite_failure is definite with its
//     code, except one whose next step is wait (the server did nothing and
//     asks to try later), which is transient. A replayed success is told
//     as replayed only when the server's action is known to have been run
//     for another call of this tool, never for one that may have been a
//     copy of this call's own request;
//   - another result with isError is what toolErrors says it is, unknown
//     if toolErrors is nil (see [ToolErrors]);
//   - another result is a success, whose result is the structured content,
//     or the text;
//   - the JSON-RPC errors parse-error, method-not-found and invalid-params,
//     and the SDK's refusals of a request's headers, capabilities or
//     protocol version, answered to the call by a server that answers with
//     retrysafe envelopes, are definite: such a server's tools never
//     answer with a JSON-RPC error, so the SDK refused the request before
//     any tool ran, as it refuses every copy of it;
//   - every other JSON-RPC error is unknown: from a server without
//     envelopes (the SDK passes a typed handler's *jsonrpc.Error straight
//     through, after the handler acted), invalid-request (a duplicate
//     in-flight request id: one copy refused, another may run), and any
//     code carried by an HTTP error status (the transport refused that
//     delivery);
//   - a call on a session that was closed before it was sent
//     (mcp.ErrConnectionClosed, while the session answers nothing more)
//     or a failed dial is transient; the same error on a session that is
//     still open was the server's answer, and is unknown;
//   - a session its server no longer knows (mcp.ErrSessionMissing) is
//     unknown: a copy of the call may have reached the session before it
//     ended. A class Keyed tool resends under the same key, on a new
//     session if ClientOptions.Reconnect gives one;
//   - anything else — a deadline after sending, a lost stream, an internal
//     error, an HTTP status the SDK reports as text — is unknown, unless an
//     error in its chain carries its own class (envelope.MarkDefinite and
//     the others, from an http.RoundTripper of yours, say).
func NewTool(session *mcp.ClientSession, t *mcp.Tool, opts agenttool.Options, toolErrors ToolErrors) (*agenttool.Tool, error) {
	if session == nil {
		return nil, fmt.Errorf("mcptool: NewTool needs a client session and a listed tool: %w", agenttool.ErrInvalidOptions)
	}
	return newTool(&link{session: session}, t, opts, ToolOptions{ToolErrors: toolErrors})
}

func newTool(l *link, t *mcp.Tool, opts agenttool.Options, to ToolOptions) (*agenttool.Tool, error) {
	if t == nil {
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
	if to.RefArgument != "" {
		if err := schema.takesRef(to.RefArgument); err != nil {
			return nil, fmt.Errorf("mcptool: tool %q: %w: %w", t.Name, err, agenttool.ErrInvalidOptions)
		}
		if opts.Class == agenttool.ReadOnly {
			return nil, fmt.Errorf("mcptool: tool %q: a reference argument (%q) is for a tool with effects, not a ReadOnly one: %w", t.Name, to.RefArgument, agenttool.ErrInvalidOptions)
		}
		if err := checkRefForm(t, to.RefArgument, refPrefix(t, opts, to), to.RefForm); err != nil {
			return nil, fmt.Errorf("mcptool: tool %q: %w: %w", t.Name, err, agenttool.ErrInvalidOptions)
		}
		schema.Required = slices.DeleteFunc(slices.Clone(schema.Required), func(f string) bool { return f == to.RefArgument })
		if opts.RefSentAs == "" {
			// Part of the definition: an action sent with the reference
			// there, so, is resent and checked only so.
			opts.RefSentAs = fmt.Sprintf("argument %s, %v", to.RefArgument, to.RefForm)
		}
	}
	if opts.Class == agenttool.Keyed && !envelopes && to.RefArgument == "" {
		return nil, fmt.Errorf("mcptool: tool %q: class Keyed says its server applies a resent call at most once, but the tool does not answer "+
			"with retrysafe envelopes (its output schema is not the envelope's) and takes no idempotency key (ToolOptions.RefArgument), "+
			"so nothing says that its server dedupes resent calls (an idempotentHint is the server's word, not a key it honours); "+
			"use AtMostOnce, or Reconcilable with a Reconciler that asks the server: %w", t.Name, agenttool.ErrInvalidOptions)
	}
	if len(opts.IdentifyingFields) == 0 && opts.Class != agenttool.ReadOnly {
		if len(schema.Required) == 0 {
			return nil, fmt.Errorf("mcptool: tool %q: its input schema marks no property required, so retrysafe cannot tell one action from another; "+
				"name the input members that do in its options' IdentifyingFields: %w", t.Name, agenttool.ErrInvalidOptions)
		}
		opts.IdentifyingFields = slices.Clone(schema.Required)
	}
	name := guardedName(t, to)
	var argSchema *jsonschema.Resolved
	if to.ValidateArguments {
		if argSchema, err = argumentSchema(t, to.RefArgument); err != nil {
			return nil, fmt.Errorf("mcptool: tool %q: %w", t.Name, err)
		}
	}
	if to.Late != nil && to.LateWindow > opts.LateWindow {
		// Its requests may land that much later: the engine's rules count it.
		opts.LateWindow = to.LateWindow
	}
	var relayKey []byte
	if to.RelayInput {
		relayKey = make([]byte, 32)
		rand.Read(relayKey) // never fails (crypto/rand)
	}
	return agenttool.Wrap(&remote{link: l, tool: t, name: name, description: describe(t.Description, schema.raw),
		envelopes: envelopes, toolErrors: to.ToolErrors, refArg: to.RefArgument, refForm: to.RefForm, whole: to.WholeResult, passMeta: to.PassMeta, relay: to.RelayInput, relayKey: relayKey,
		lateWindow: to.LateWindow, late: to.Late, lateDone: to.LateDone, schema: argSchema}, opts)
}

// guardedName is the name a tool made of t goes by (ToolOptions.Name).
func guardedName(t *mcp.Tool, to ToolOptions) string {
	if to.Name != "" {
		return to.Name
	}
	return t.Name
}

// refPrefix is what the request references of a tool made of t start
// with: its key prefix, which is by default its name.
func refPrefix(t *mcp.Tool, opts agenttool.Options, to ToolOptions) string {
	if opts.KeyPrefix != "" {
		return opts.KeyPrefix
	}
	return guardedName(t, to)
}

// remote is a listed MCP tool as an agenttool.Callable.
type remote struct {
	link        *link
	tool        *mcp.Tool // as listed
	name        string
	description string
	envelopes   bool // its output schema is the envelope's: it answers with retrysafe envelopes
	toolErrors  ToolErrors
	refArg      string  // ToolOptions.RefArgument
	refForm     RefForm // ToolOptions.RefForm
	whole       bool    // ToolOptions.WholeResult
	passMeta    bool    // ToolOptions.PassMeta
	relay       bool    // ToolOptions.RelayInput
	relayKey    []byte  // what it seals the server's requestState with (relay.go)
	lateWindow  time.Duration
	late        func(agenttool.CallInfo, string, error) // ToolOptions.LateWindow, Late, LateDone
	lateDone    <-chan struct{}
	seen        sightings            // the server's actions this tool saw done
	schema      *jsonschema.Resolved // ToolOptions.ValidateArguments: the input schema, resolved
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
	args, err := r.arguments(ctx, input)
	if err != nil {
		return "", err
	}
	params := &mcp.CallToolParams{Name: r.tool.Name, Arguments: args, Meta: r.meta(ctx)}
	if rl := r.relayFor(ctx); rl != nil {
		rl.input = input // what a question's state is sealed to (readResult)
		if state, ok := r.unseal(agenttool.RequestRef(ctx), input, rl.state); ok {
			// A later round of this action's question: the same request,
			// with the client's answers. Any other goes as a first round.
			params.InputResponses, params.RequestState = rl.responses, state
		}
	}
	session, err := r.link.open(ctx)
	if err != nil {
		return "", err
	}
	sent := time.Now()
	if r.lateWindow <= 0 || r.late == nil {
		markedCtx, mark := markSend(ctx)
		res, err := session.CallTool(markedCtx, params)
		if err != nil {
			return "", r.callFailed(ctx, session, mark, err)
		}
		return r.readResult(ctx, res, sent)
	}
	// The call runs on a context of its own, so that an attempt that
	// reaches its deadline can go on listening for the answer.
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	callCtx, mark := markSend(callCtx)
	answered := make(chan callAnswer, 1)
	go func() {
		res, err := session.CallTool(callCtx, params)
		answered <- callAnswer{res, err}
	}()
	select {
	case a := <-answered:
		cancel()
		if a.err != nil {
			return "", r.callFailed(ctx, session, mark, a.err)
		}
		return r.readResult(ctx, a.res, sent)
	case <-ctx.Done():
	}
	info, _ := agenttool.CallInfoFrom(ctx)
	until := time.Now().Add(r.lateWindow)
	if k := info.KeyDeadline; !k.IsZero() && k.Before(until) {
		// No request may be in flight once the server may forget its key.
		until = k
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !time.Now().Before(until) {
		// The caller cancelled, or the key's deadline passed: so is the
		// call, at the server.
		cancel()
		a := <-answered
		if a.err != nil {
			return "", r.callFailed(ctx, session, mark, a.err)
		}
		return r.readResult(ctx, a.res, sent) // it answered first
	}
	go r.listenLate(info, answered, cancel, sent, until)
	return "", envelope.MarkUnknown(fmt.Errorf("no answer from the MCP server by the attempt's deadline (%w); the server may act still, and its answer will be recorded if it comes within %v", ctx.Err(), r.lateWindow))
}

// toolSchema is what NewTool reads of a listed tool's input schema.
type toolSchema struct {
	Type       any                        `json:"type"`
	Required   []string                   `json:"required"`
	Properties map[string]json.RawMessage `json:"properties"`
	raw        []byte                     // the schema, compact
}

// takesRef checks that the schema has a string property arg, in which the
// server takes a request reference.
func (s toolSchema) takesRef(arg string) error {
	p, ok := s.Properties[arg]
	if !ok {
		return fmt.Errorf("the reference argument %q is not a property of its input schema, so its server takes nothing there", arg)
	}
	var prop struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(p, &prop) == nil && prop.Type != nil && prop.Type != "string" {
		return fmt.Errorf("the reference argument %q has type %v in its input schema; a request reference is a string", arg, prop.Type)
	}
	return nil
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
