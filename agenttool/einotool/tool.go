package einotool

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	"github.com/eino-contrib/jsonschema"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/internal/toolcall"
)

// CodeUnknownTool is the error code of the envelope that answers a call
// of a tool the model was not offered. Nothing ran.
const CodeUnknownTool = toolcall.CodeUnknownTool

// Tool is a guarded tool as an Eino tool.InvokableTool. A Tool is safe for
// concurrent use.
type Tool struct {
	t    *agenttool.Tool
	info *schema.ToolInfo
}

var _ tool.InvokableTool = (*Tool)(nil)

// New returns t as an Eino tool. It returns an error if t is nil or its
// schema cannot be read as a JSON Schema.
func New(t *agenttool.Tool) (*Tool, error) {
	if t == nil {
		return nil, fmt.Errorf("einotool: the tool is nil")
	}
	var js jsonschema.Schema
	if err := json.Unmarshal(t.Schema(), &js); err != nil {
		return nil, fmt.Errorf("einotool: tool %q: its input schema cannot be read: %w", t.Name(), err)
	}
	return &Tool{t: t, info: &schema.ToolInfo{
		Name:        t.Name(),
		Desc:        t.Description(),
		ParamsOneOf: schema.NewParamsOneOfByJSONSchema(&js),
	}}, nil
}

// Info describes the tool to the model: its name, its description (which
// tells the model how to read the envelope) and its real input schema.
// The returned value is shared: do not change it.
func (e *Tool) Info(context.Context) (*schema.ToolInfo, error) { return e.info, nil }

// InvokableRun runs one guarded call with the model's arguments and
// returns the envelope's JSON and a nil error, always.
func (e *Tool) InvokableRun(ctx context.Context, argumentsInJSON string, _ ...tool.Option) (string, error) {
	return e.t.Invoke(ctx, argumentsInJSON).String(), nil
}

// Guarded returns the guarded tool.
func (e *Tool) Guarded() *agenttool.Tool { return e.t }

// Tools returns the guarded tools as Eino tools, in the order given. It
// returns an error if there are none, one is nil, or two share a name.
func Tools(tools ...*agenttool.Tool) ([]tool.BaseTool, error) {
	if _, err := toolcall.NewSet("einotool", tools); err != nil {
		return nil, err
	}
	out := make([]tool.BaseTool, len(tools))
	for i, t := range tools {
		et, err := New(t)
		if err != nil {
			return nil, err
		}
		out[i] = et
	}
	return out, nil
}

// ToolsConfig returns a ToolsNode configuration for the guarded tools: the
// tools ([Tools]), calls of one message run in the model's order
// (ExecuteSequentially; see "Parallel tool calls" in the package doc), and
// an UnknownToolsHandler that answers a call of any other name with an
// envelope instead of ending the run ([UnknownTool]).
func ToolsConfig(tools ...*agenttool.Tool) (compose.ToolsNodeConfig, error) {
	ts, err := Tools(tools...)
	if err != nil {
		return compose.ToolsNodeConfig{}, err
	}
	return compose.ToolsNodeConfig{
		Tools:               ts,
		ExecuteSequentially: true,
		UnknownToolsHandler: UnknownTool(tools...),
	}, nil
}

// UnknownTool returns an UnknownToolsHandler (compose.ToolsNodeConfig)
// that answers a call of a tool the model was not offered with a definite
// failure, code unknown_tool, naming the given tools; nothing runs and the
// run goes on.
func UnknownTool(tools ...*agenttool.Tool) func(ctx context.Context, name, input string) (string, error) {
	var names []string
	for _, t := range tools {
		if t != nil {
			names = append(names, t.Name())
		}
	}
	return func(_ context.Context, name, _ string) (string, error) {
		return toolcall.UnknownTool(name, names).String(), nil
	}
}

// CallID returns the id of the tool call that a guarded call on ctx
// answers (compose.GetToolCallID), or "" outside one: for hooks
// (agenttool.Hooks receive the call's context) and logs. It is never part
// of a key.
func CallID(ctx context.Context) string { return compose.GetToolCallID(ctx) }
