// Package openaitool runs the tool calls of an openai-go
// (github.com/openai/openai-go/v3) Chat Completions loop through guarded
// tools. openai-go has no tool interface: your loop reads the assistant
// message's tool calls and answers each with a tool message carrying its
// call id. A [Toolbox] does both halves: [Toolbox.Definitions] offers the
// guarded tools with their real input schemas, and [Toolbox.Run] answers
// every tool call of one assistant message with the call's envelope.
// agenttool itself does not import openai-go.
//
// # Basics
//
//	box, err := openaitool.New(send, book)
//	params := openai.ChatCompletionNewParams{Model: openai.ChatModelGPT4oMini, Tools: box.Definitions(),
//		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
//	ctx = agenttool.WithScope(ctx, "tenant-42/user-7", "conversation-9") // trusted code says who acts
//	for {
//		completion, err := client.Chat.Completions.New(ctx, params)
//		if err != nil {
//			return err
//		}
//		msg := completion.Choices[0].Message
//		params.Messages = append(params.Messages, msg.ToParam())
//		if len(msg.ToolCalls) == 0 {
//			break // msg.Content is the answer
//		}
//		params.Messages = append(params.Messages, box.Run(ctx, msg)...)
//	}
//
// # What a call gets
//
// Each tool call goes through its tool's Invoke with the arguments as the
// model wrote them and the scope (and action id, label) the application put
// on ctx: retrysafe alone reads them, refuses malformed JSON and
// model-supplied keys, and derives the action's key. The answer is the
// envelope's JSON as the tool message's content, whatever the outcome: a
// definite failure or an unknown outcome is an answer the model must read,
// not an error that ends the loop. A call of a tool the model was not
// offered is answered with a definite failure, code unknown_tool, that
// names the tools it may call; nothing runs. The call id is on the call's
// context ([CallID]) for hooks and logs; it is never part of a key (a
// model makes a new id for every resend).
//
// # Parallel tool calls
//
// A model may put several tool calls in one message. [Toolbox.Run] runs
// them in the model's order, one after the other, and this is the safe
// default: a call that comes after one whose outcome is unknown meets the
// unknown fence (it is held, earlier_action_unknown, until the earlier
// action is settled), and copies of one action are replayed.
// [Toolbox.RunConcurrently] starts them all at once: copies of one action
// (the same key) still run once, the others wait and replay its outcome;
// and different actions of one tool in one session still run one after
// the other, in no set order: a second waits for the first (at most the
// tool's WaitTimeout, then in_progress) and is held by the unknown fence
// if the first ends unknown. It gains time across tools and for reads;
// use [Toolbox.Run] where the order of a message's calls matters.
//
// # Strict mode
//
// [Toolbox.Definitions] sets strict (Structured Outputs) on a tool whose
// schema allows it ([StrictSchema]): a tool built with agenttool.New from
// an input struct whose fields are all required (no pointers, no
// omitempty, no maps, no interface fields). Then the model can only send
// the members the schema names, so it cannot add a key-like field or a
// nonce. Other tools are offered without strict, and retrysafe refuses
// what their schema does not allow.
package openaitool
