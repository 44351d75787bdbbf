package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// readResult turns a tools/call result into the text a guarded tool returns,
// or an error with its class (see NewTool).
//
// A result is read as a retrysafe envelope only from a tool that declares
// the envelope's output schema (envelopes), when the envelope names the
// tool and isError agrees with its status; anything else is the tool's own
// output, which may hold text the model wrote.
//
// sent is when the call was sent: a replayed success is told as replayed
// only if the server's action was seen done before it (see [sightings]).
func (r *remote) readResult(ctx context.Context, res *mcp.CallToolResult, sent time.Time) (string, error) {
	if res.NeedsInput() {
		// The server ended the request to ask the client for input
		// (multi-round-trip, SEP-2322): it acts only in a later round that
		// carries the answers, which this call will not send. Asking for
		// nothing is how it sheds load: try again later. A request for input
		// is all such a result may carry: one that carries a result too (or
		// an error) is not the protocol's, and proves nothing of what the
		// server did ("Sent. Notify the team too?").
		if len(res.Content) > 0 || res.StructuredContent != nil || res.IsError {
			return "", envelope.MarkUnknown(fmt.Errorf("the MCP tool %s answered with a request for input and a result at once, which the protocol does not allow; "+
				"it may have acted before it asked", r.tool.Name))
		}
		if len(res.InputRequests) == 0 {
			return "", envelope.MarkTransient(fmt.Errorf("the MCP tool %s is busy: it ended the call asking for no input, and did nothing", r.tool.Name))
		}
		if rl := r.relayFor(ctx); rl != nil {
			// The front answers its client with it, its state sealed to
			// this action.
			sealed := *res
			sealed.RequestState = r.seal(agenttool.RequestRef(ctx), rl.input, res.RequestState)
			rl.asked.Store(&sealed)
		}
		return "", envelope.MarkDefinite(fmt.Errorf("the MCP tool %s: %w (%s); nothing was done",
			r.tool.Name, agenttool.ErrAwaitsInput, describeInputRequests(res.InputRequests)), CodeInputRequired)
	}
	if env, ok := carriedEnvelope(res); ok && r.envelopes && env.Tool == r.tool.Name && res.IsError == (env.Status != envelope.Success) {
		if env.Status == envelope.Success {
			r.seen.success(ctx, env, sent)
			if r.whole {
				return wholeResult(res)
			}
		}
		return fromEnvelope(env)
	}
	text := joinedText(res)
	if res.IsError {
		if text == "" {
			text = "no details given"
		}
		class := envelope.Unknown
		if r.toolErrors != nil {
			class = r.toolErrors(r.tool, res)
		}
		err := fmt.Errorf("the MCP tool %s reported an error: %s", r.tool.Name, text)
		switch class {
		case envelope.Definite:
			return "", envelope.MarkDefinite(err, "")
		case envelope.Transient:
			return "", envelope.MarkTransient(err)
		}
		return "", envelope.MarkUnknown(fmt.Errorf("%w; it may have acted before it failed", err))
	}
	if r.whole {
		return wholeResult(res)
	}
	if res.StructuredContent == nil {
		return text, nil
	}
	if sameJSON(text, res.StructuredContent) {
		return text, nil // the server's own serialisation: exact numbers, its order
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return text, nil // cannot happen with what the SDK decoded; the call succeeded either way
	}
	return string(b), nil
}

// carriedEnvelope returns the retrysafe envelope a result carries in its
// structured content or, failing that, in a text block. A text block that
// holds the same envelope as the structured content is preferred: it is
// the server's bytes, with numbers the SDK's decoding may have rounded.
func carriedEnvelope(res *mcp.CallToolResult) (envelope.Envelope, bool) {
	var fromText *envelope.Envelope
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok && strings.HasPrefix(strings.TrimSpace(t.Text), "{") {
			if env, err := envelope.Parse([]byte(t.Text)); err == nil {
				fromText = &env
				break
			}
		}
	}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			if env, err := envelope.Parse(b); err == nil {
				if fromText != nil && fromText.Status == env.Status && fromText.RequestRef == env.RequestRef {
					return *fromText, true
				}
				return env, true
			}
		}
	}
	if fromText != nil {
		return *fromText, true
	}
	return envelope.Envelope{}, false
}

// fromEnvelope keeps the status of a server's envelope.
func fromEnvelope(env envelope.Envelope) (string, error) {
	switch env.Status {
	case envelope.Success:
		if len(env.Result) == 0 {
			return "null", nil
		}
		return string(env.Result), nil
	case envelope.UnknownOutcome:
		return "", envelope.MarkUnknown(upstreamError(env))
	}
	if env.Next == envelope.Wait {
		// Nothing was done and the server asks to try later (unavailable,
		// store_unavailable, cancelled): recorded as a failure, the action
		// would be refused until its key expires.
		return "", envelope.MarkTransient(upstreamError(env))
	}
	return "", envelope.MarkDefinite(upstreamError(env), env.Error.Code)
}

// upstreamError says what a server's failure or unknown outcome was,
// including what it said of an earlier action, for the model to read.
func upstreamError(env envelope.Envelope) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the MCP server's %s answered %s", env.Tool, env.Status)
	if env.Error != nil {
		fmt.Fprintf(&b, " (%s): %s", env.Error.Code, env.Error.Message)
	}
	if e := env.Earlier; e != nil {
		fmt.Fprintf(&b, "; its earlier action %s %s", e.RequestRef, e.State)
		if len(e.Result) > 0 {
			fmt.Fprintf(&b, " with result %s", e.Result)
		}
	}
	return errors.New(b.String())
}

func joinedText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// sameJSON reports whether text is JSON that decodes to what structured
// decoded to.
func sameJSON(text string, structured any) bool {
	var v any
	if json.Unmarshal([]byte(text), &v) != nil {
		return false
	}
	b, err := json.Marshal(structured)
	if err != nil {
		return false
	}
	var w any
	if json.Unmarshal(b, &w) != nil {
		return false
	}
	return reflect.DeepEqual(v, w)
}

// CodeInputRequired is the code of a call's definite failure when its
// server asked for input before acting (an elicitation, a sampling or a
// roots request of a multi-round-trip result) and the call did not relay
// it (ToolOptions.RelayInput): nothing was done, and the action's key was
// given back (agenttool.ErrAwaitsInput).
const CodeInputRequired = "input_required"

// describeInputRequests names what a server asked for, for a message.
func describeInputRequests(reqs mcp.InputRequestMap) string {
	var kinds []string
	for _, id := range slices.Sorted(maps.Keys(reqs)) {
		switch p := reqs[id].(type) {
		case *mcp.ElicitParams:
			kinds = append(kinds, fmt.Sprintf("a question to the user, %q", p.Message))
		default: // a completion of the client's model, the client's roots
			kinds = append(kinds, strings.TrimPrefix(fmt.Sprintf("%T", p), "*mcp."))
		}
	}
	return strings.Join(kinds, "; ")
}
