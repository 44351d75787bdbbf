package openaitool

import (
	"context"
	"encoding/json"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/internal/toolcall"
	"github.com/retrysafe/retrysafe/envelope"
)

// CodeUnknownTool is the error code of the envelope that answers a call
// of a tool the model was not offered. Nothing ran.
const CodeUnknownTool = toolcall.CodeUnknownTool

// Toolbox is a set of guarded tools for one Chat Completions loop. A
// Toolbox is safe for concurrent use.
type Toolbox struct {
	set *toolcall.Set
}

// New returns a toolbox of the given tools. It returns an error if there
// are none, one is nil, or two share a name.
func New(tools ...*agenttool.Tool) (*Toolbox, error) {
	set, err := toolcall.NewSet("openaitool", tools)
	if err != nil {
		return nil, err
	}
	return &Toolbox{set: set}, nil
}

// Definitions returns the tools as Chat Completions function tools, in the
// order given to New: name, description (which tells the model how to
// read the envelope) and the tool's real input schema, strict where the
// schema allows it ([StrictSchema]).
func (b *Toolbox) Definitions() []openai.ChatCompletionToolUnionParam {
	var out []openai.ChatCompletionToolUnionParam
	for _, t := range b.set.Tools() {
		out = append(out, Definition(t))
	}
	return out
}

// Definition returns one guarded tool as a Chat Completions function tool
// (see [Toolbox.Definitions]).
func Definition(t *agenttool.Tool) openai.ChatCompletionToolUnionParam {
	var params shared.FunctionParameters
	json.Unmarshal(t.Schema(), &params) // a tool's schema is a JSON object
	def := shared.FunctionDefinitionParam{
		Name:        t.Name(),
		Description: param.NewOpt(t.Description()),
		Parameters:  params,
	}
	if StrictSchema(t.Schema()) {
		def.Strict = param.NewOpt(true)
	}
	return openai.ChatCompletionFunctionTool(def)
}

// Run runs every tool call of msg through its guarded tool, in the
// model's order, each after the one before it ended, and returns one tool
// message per call, in the same order, carrying the call's id and its
// envelope's JSON. A message without tool calls returns nothing. Run never
// fails: every outcome, refusal and unknown tool name is an envelope the
// model reads (see the package doc).
func (b *Toolbox) Run(ctx context.Context, msg openai.ChatCompletionMessage) []openai.ChatCompletionMessageParamUnion {
	return b.run(ctx, msg, false)
}

// RunConcurrently is [Toolbox.Run] with the calls started all at once: see
// "Parallel tool calls" in the package doc for what the unknown fence then
// does and does not hold back.
func (b *Toolbox) RunConcurrently(ctx context.Context, msg openai.ChatCompletionMessage) []openai.ChatCompletionMessageParamUnion {
	return b.run(ctx, msg, true)
}

// Envelopes runs the calls as [Toolbox.Run] does and returns their
// envelopes, for a loop that builds its tool messages itself.
func (b *Toolbox) Envelopes(ctx context.Context, msg openai.ChatCompletionMessage) []envelope.Envelope {
	return b.set.Run(ctx, calls(msg), false, withCallID)
}

func (b *Toolbox) run(ctx context.Context, msg openai.ChatCompletionMessage, concurrent bool) []openai.ChatCompletionMessageParamUnion {
	cs := calls(msg)
	envs := b.set.Run(ctx, cs, concurrent, withCallID)
	out := make([]openai.ChatCompletionMessageParamUnion, len(cs))
	for i, env := range envs {
		out[i] = openai.ToolMessage(env.String(), cs[i].ID)
	}
	return out
}

// calls reads the tool calls of msg: function calls, and custom tool calls
// by their name and input.
func calls(msg openai.ChatCompletionMessage) []toolcall.Call {
	out := make([]toolcall.Call, len(msg.ToolCalls))
	for i, c := range msg.ToolCalls {
		out[i] = toolcall.Call{ID: c.ID, Name: c.Function.Name, Args: c.Function.Arguments}
		if c.Type == "custom" {
			out[i].Name, out[i].Args = c.Custom.Name, c.Custom.Input
		}
	}
	return out
}

type callIDKey struct{}

func withCallID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, callIDKey{}, id)
}

// CallID returns the id of the tool call that a guarded call on ctx
// answers, or "" outside one: for hooks (agenttool.Hooks receive the call's
// context) and logs. It is never part of a key.
func CallID(ctx context.Context) string {
	id, _ := ctx.Value(callIDKey{}).(string)
	return id
}
