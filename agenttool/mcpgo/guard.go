package mcpgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// Guard guards tools an mcp-go server already has, through its tool
// handler middleware: every tools/call of a guarded name goes through a
// guarded tool whose attempts call the tool's own handler. A Guard is safe
// for concurrent use.
type Guard struct {
	tools map[string]*agenttool.Tool
	o     Options
}

// NewGuard guards the tools named in byName, each with its options
// (agenttool.Wrap's: a handler's input is one JSON object, so
// IdentifyingFields is required). opts configure the scope and what a
// handler's isError means ([Options]); Class and Annotations are not
// used: the tools are listed as they were added. NewGuard returns an error
// if byName is empty or the options of a tool are not valid.
func NewGuard(byName map[string]agenttool.Options, opts *Options) (*Guard, error) {
	if len(byName) == 0 {
		return nil, errors.New("mcpgo: NewGuard needs at least one tool to guard")
	}
	g := &Guard{tools: map[string]*agenttool.Tool{}, o: opts.withDefaults()}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		t, err := agenttool.Wrap(handlerTool{name: name, toolErrors: g.o.ToolErrors}, byName[name])
		if err != nil {
			return nil, fmt.Errorf("mcpgo: tool %q: %w", name, err)
		}
		g.tools[name] = t
	}
	return g, nil
}

// Tools returns the guarded tools, by name: for agenttool.NewOperator,
// which settles their unknown outcomes with their reconcilers.
func (g *Guard) Tools() []*agenttool.Tool {
	var out []*agenttool.Tool
	for _, name := range slices.Sorted(maps.Keys(g.tools)) {
		out = append(out, g.tools[name])
	}
	return out
}

// Middleware returns the middleware to give the server
// (server.WithToolHandlerMiddleware). A call of a guarded tool gets the
// scope as [Handler] does, goes through the guarded tool's Invoke with the
// raw arguments, and is answered with the envelope as [Handler] answers:
// the handler runs only in the guarded tool's attempts, with the
// arguments in the canonical form that was digested, and finds the
// request reference on its context (agenttool.RequestRef). A handler's
// result becomes the envelope's result (its structured content, or its
// text); its isError, what [Options].ToolErrors says (unknown by
// default); its error, what envelope.Classify says (unknown unless it is
// marked). Calls of other tools pass through untouched.
//
// Add agenttool.EnvelopeHint to a guarded tool's description, so that
// the model knows how to read what it now answers.
func (g *Guard) Middleware() server.ToolHandlerMiddleware {
	return func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			t, ok := g.tools[req.Params.Name]
			if !ok {
				return next(ctx, req)
			}
			ctx, refused := g.o.scoped(ctx, t.Name(), req)
			if refused != nil {
				return toolResult(*refused), nil
			}
			ctx = context.WithValue(ctx, nextKey{}, &nextCall{next: next, req: req})
			return toolResult(t.Invoke(ctx, rawArguments(req))), nil
		}
	}
}

type nextKey struct{}

// nextCall is the handler a guarded call's attempts run, and its request.
type nextCall struct {
	next server.ToolHandlerFunc
	req  mcp.CallToolRequest
}

// handlerTool is the tool a Guard wraps: an attempt calls the handler the
// middleware found.
type handlerTool struct {
	name       string
	toolErrors func(*mcp.CallToolResult) envelope.Class
}

func (h handlerTool) Name() string        { return h.name }
func (h handlerTool) Description() string { return "" }

func (h handlerTool) Call(ctx context.Context, input string) (string, error) {
	c, ok := ctx.Value(nextKey{}).(*nextCall)
	if !ok {
		return "", envelope.MarkDefinite(fmt.Errorf("mcpgo: the guarded tool %s runs only inside its Guard's middleware", h.name), envelope.CodeRejected)
	}
	req := c.req
	req.Params.RawArguments = json.RawMessage(input)
	var args any
	json.Unmarshal([]byte(input), &args) // the canonical form: valid JSON
	req.Params.Arguments = args
	res, err := c.next(ctx, req)
	if err != nil {
		return "", fmt.Errorf("the tool handler of %s failed: %w", h.name, err)
	}
	if res == nil {
		return "", envelope.MarkUnknown(fmt.Errorf("the tool handler of %s returned no result and no error", h.name))
	}
	text := joinedText(res)
	if res.IsError {
		if text == "" {
			text = "no details given"
		}
		class := envelope.Unknown
		if h.toolErrors != nil {
			class = h.toolErrors(res)
		}
		err := fmt.Errorf("the tool %s reported an error: %s", h.name, text)
		switch class {
		case envelope.Definite:
			return "", envelope.MarkDefinite(err, "")
		case envelope.Transient:
			return "", envelope.MarkTransient(err)
		}
		return "", envelope.MarkUnknown(fmt.Errorf("%w; it may have acted before it failed", err))
	}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return string(b), nil
		}
	}
	return text, nil
}

func joinedText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := mcp.AsTextContent(c); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}
