// Package einotool makes guarded tools Eino tools
// (github.com/cloudwego/eino): each is a tool.InvokableTool whose Info
// carries the guarded tool's real input schema and whose InvokableRun goes
// through Tool.Invoke. agenttool itself does not import Eino.
//
// # Basics
//
//	tools, err := einotool.ToolsConfig(send, book)
//	agent, err := react.NewAgent(ctx, &react.AgentConfig{ToolCallingModel: model, ToolsConfig: tools})
//	ctx = agenttool.WithScope(ctx, "tenant-42/user-7", "conversation-9") // trusted code says who acts
//	answer, err := agent.Generate(ctx, []*schema.Message{schema.UserMessage(prompt)})
//
// [ToolsConfig] is a compose.ToolsNodeConfig: give it to a react agent, to
// compose.NewToolNode in a graph of your own, or as the ToolsNodeConfig of
// an adk.ChatModelAgent. [Tools] returns the tools alone.
//
// # What a call gets
//
// InvokableRun passes the arguments as the model wrote them to Invoke,
// with the scope (and action id, label) the application put on the
// context: retrysafe alone reads them, refuses malformed JSON and
// model-supplied keys, and derives the action's key. It returns the
// envelope's JSON and a nil error, whatever the outcome: Eino's ToolsNode
// ends the whole run when a tool returns an error, and the model must read
// every outcome, unknown ones above all. A call of a tool the model was
// not offered is answered by [ToolsConfig]'s UnknownToolsHandler with a
// definite failure, code unknown_tool, that names the tools it may call;
// without it, Eino ends the run. The call id is on the tool's context
// (compose.GetToolCallID, or [CallID]) for hooks and logs; it is never
// part of a key (a model makes a new id for every resend).
//
// # Parallel tool calls
//
// Eino's ToolsNode runs the calls of one message concurrently unless told
// otherwise; [ToolsConfig] tells it to run them in the model's order
// (ExecuteSequentially), the safe default: a call that comes after one
// whose outcome is unknown meets the unknown fence (earlier_action_unknown)
// and copies of one action are replayed. Run concurrently, copies of one
// action (one key) still run once, the others wait and replay its outcome;
// and different actions of one tool in one session still run one after
// the other, in no set order: a second waits for the first (at most the
// tool's WaitTimeout, then in_progress) and is held by the unknown fence
// if the first ends unknown. Setting ExecuteSequentially to false gains
// time only across tools and for reads; keep it true where the order of a
// message's calls matters.
package einotool
