package anthropictool

import (
	"context"
	"encoding/json"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/internal/toolcall"
	"github.com/retrysafe/retrysafe/envelope"
)

// CodeUnknownTool is the error code of the envelope that answers a
// tool_use of a tool the model was not offered. Nothing ran.
const CodeUnknownTool = toolcall.CodeUnknownTool

// Toolbox is a set of guarded tools for one Messages loop. A Toolbox is
// safe for concurrent use.
type Toolbox struct {
	set *toolcall.Set
}

// New returns a toolbox of the given tools. It returns an error if there
// are none, one is nil, or two share a name.
func New(tools ...*agenttool.Tool) (*Toolbox, error) {
	set, err := toolcall.NewSet("anthropictool", tools)
	if err != nil {
		return nil, err
	}
	return &Toolbox{set: set}, nil
}

// Definitions returns the tools as Messages API tools, in the order given
// to New (see [Definition]).
func (b *Toolbox) Definitions() []anthropic.ToolUnionParam {
	var out []anthropic.ToolUnionParam
	for _, t := range b.set.Tools() {
		out = append(out, Definition(t))
	}
	return out
}

// Definition returns one guarded tool as a Messages API tool: its name,
// its description (which tells the model how to read the envelope) and its
// real input schema — properties and required as the SDK's fields, every
// other keyword (additionalProperties, $defs) as they are.
func Definition(t *agenttool.Tool) anthropic.ToolUnionParam {
	var schema map[string]json.RawMessage
	json.Unmarshal(t.Schema(), &schema) // a tool's schema is a JSON object
	var in anthropic.ToolInputSchemaParam
	for k, v := range schema {
		switch k {
		case "type":
		case "properties":
			in.Properties = v
		case "required":
			json.Unmarshal(v, &in.Required)
		default:
			if in.ExtraFields == nil {
				in.ExtraFields = map[string]any{}
			}
			in.ExtraFields[k] = v
		}
	}
	def := anthropic.ToolUnionParamOfTool(in, t.Name())
	def.OfTool.Description = anthropic.String(t.Description())
	return def
}

// Run runs every tool_use block of msg through its guarded tool, in the
// model's order, each after the one before it ended, and returns the user
// message that answers them: one tool_result per block, in the same
// order. A message without tool_use blocks returns nothing. Run never
// fails: every outcome, refusal and unknown tool name is an envelope the
// model reads (see the package doc).
func (b *Toolbox) Run(ctx context.Context, msg anthropic.Message) []anthropic.MessageParam {
	return b.run(ctx, msg, false)
}

// RunConcurrently is [Toolbox.Run] with the calls started all at once: see
// "Parallel tool use" in the package doc for what the unknown fence then
// does and does not hold back.
func (b *Toolbox) RunConcurrently(ctx context.Context, msg anthropic.Message) []anthropic.MessageParam {
	return b.run(ctx, msg, true)
}

// Envelopes runs the calls as [Toolbox.Run] does and returns their
// envelopes, for a loop that builds its tool_result blocks itself.
func (b *Toolbox) Envelopes(ctx context.Context, msg anthropic.Message) []envelope.Envelope {
	return b.set.Run(ctx, calls(msg), false, withCallID)
}

func (b *Toolbox) run(ctx context.Context, msg anthropic.Message, concurrent bool) []anthropic.MessageParam {
	cs := calls(msg)
	if len(cs) == 0 {
		return nil
	}
	envs := b.set.Run(ctx, cs, concurrent, withCallID)
	blocks := make([]anthropic.ContentBlockParamUnion, len(cs))
	for i, env := range envs {
		blocks[i] = anthropic.NewToolResultBlock(cs[i].ID, env.String(), env.Status != envelope.Success)
	}
	return []anthropic.MessageParam{anthropic.NewUserMessage(blocks...)}
}

// calls reads the tool_use blocks of msg.
func calls(msg anthropic.Message) []toolcall.Call {
	var out []toolcall.Call
	for _, b := range msg.Content {
		if b.Type == "tool_use" {
			out = append(out, toolcall.Call{ID: b.ID, Name: b.Name, Args: string(b.Input)})
		}
	}
	return out
}

type callIDKey struct{}

func withCallID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, callIDKey{}, id)
}

// CallID returns the id of the tool_use block that a guarded call on ctx
// answers, or "" outside one: for hooks (agenttool.Hooks receive the call's
// context) and logs. It is never part of a key.
func CallID(ctx context.Context) string {
	id, _ := ctx.Value(callIDKey{}).(string)
	return id
}
