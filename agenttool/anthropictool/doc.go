// Package anthropictool runs the tool_use blocks of an anthropic-sdk-go
// (github.com/anthropics/anthropic-sdk-go/v2) Messages loop through
// guarded tools. Your loop sends the tools' definitions and, after each
// assistant message that asks for tools, one user message of tool_result
// blocks: [Toolbox.Definitions] gives the first, with the guarded tools'
// real input schemas, and [Toolbox.Run] the second, with each call's
// envelope. agenttool itself does not import anthropic-sdk-go.
//
// # Basics
//
//	box, err := anthropictool.New(send, book)
//	params := anthropic.MessageNewParams{Model: anthropic.ModelClaudeSonnet4_5, MaxTokens: 1024, Tools: box.Definitions(),
//		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}}
//	ctx = agenttool.WithScope(ctx, "tenant-42/user-7", "conversation-9") // trusted code says who acts
//	for {
//		msg, err := client.Messages.New(ctx, params)
//		if err != nil {
//			return err
//		}
//		params.Messages = append(params.Messages, msg.ToParam())
//		results := box.Run(ctx, *msg)
//		if len(results) == 0 {
//			break // no tool_use: msg's text is the answer
//		}
//		params.Messages = append(params.Messages, results...)
//	}
//
// # What a call gets
//
// Each tool_use block goes through its tool's Invoke with its input as the
// model wrote it and the scope (and action id, label) the application put
// on ctx: retrysafe alone reads it, refuses input that is not one JSON
// object and model-supplied keys, and derives the action's key. Its answer
// is a tool_result block with the envelope's JSON as text, is_error set
// unless the status is success: a definite failure or an unknown outcome
// is an answer the model must read, never an error that ends the loop. A
// tool_use of a tool the model was not offered is answered with a definite
// failure, code unknown_tool, that names the tools it may call; nothing
// runs. The tool_use id is on the call's context ([CallID]) for hooks and
// logs; it is never part of a key.
//
// # Parallel tool use
//
// Claude may ask for several tools in one message. [Toolbox.Run] runs them
// in the model's order, one after the other, the safe default: a call
// that comes after one whose outcome is unknown meets the unknown fence
// (earlier_action_unknown), and copies of one action are replayed.
// [Toolbox.RunConcurrently] starts them all at once, as the SDK's beta tool
// runner does: copies of one action (one key) still run once, the others
// wait and replay its outcome; and different actions of one tool in one
// session still run one after the other, in no set order: a second waits
// for the first (at most the tool's WaitTimeout, then in_progress) and is
// held by the unknown fence if the first ends unknown. It gains time
// across tools and for reads; use [Toolbox.Run] where the order of a
// message's calls matters.
package anthropictool
