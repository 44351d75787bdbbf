// Package langchaintest is a scripted langchaingo model for offline tests of
// agents that use guarded tools.
//
// A test scripts the model's turns — tool calls and a final answer — and
// runs the real agent (agents.NewOpenAIFunctionsAgent and agents.NewExecutor)
// with it. Each time the agent asks the model for a turn, the model plays
// the next one; it reads the tool results the agent passes back (the
// guarded tools' envelopes), checks them where a [Turn] says so, and keeps
// them for the test ([Model.Results]).
//
// # Basics
//
//	model := langchaintest.New(
//		langchaintest.Call("send_email", `{"to":"ana@example.com","subject":"Lunch","body":"Noon?"}`),
//		langchaintest.Final("Ana has been emailed.").Checking(langchaintest.WantStatus(envelope.Success)),
//	)
//	agent := agents.NewOpenAIFunctionsAgent(model, []tools.Tool{send})
//	answer, err := chains.Run(ctx, agents.NewExecutor(agent), "Email Ana about lunch.")
//	// err is nil, answer is "Ana has been emailed.", and model.Err() is nil
//	// once the whole script was played.
//
// [Func] plays an adaptive script instead: a function of the results read
// so far, as a real model decides from what its tools answered.
//
// # Failing clearly
//
// The model answers an error, which the executor returns from the run, when
//
//   - the agent asks for a turn the script does not hold (the error names the
//     turn, the script's turns and the result the model last read);
//   - a scripted call names a tool the agent did not offer;
//   - a turn's Check refuses the result the model read at that turn;
//   - a [Func] script returns an error.
//
// All wrap [ErrUnexpectedTurn] or [ErrCheckFailed]. After the run,
// [Model.Err] reports the first of them, or [ErrNotPlayed] if the agent
// stopped before the script's end.
//
// # Caveats
//
//   - The model plays one script, one turn per request, in the order the
//     requests arrive: give each conversation a Model of its own. One
//     script may span several runs of the executor (several user messages):
//     the turns after a final answer play the next run.
//   - It knows which tools the agent offers from the call options
//     (llms.WithFunctions or llms.WithTools), as the functions agent passes
//     them, and from langchain.WithToolSchemas.
//   - langchaingo's executor stops after 5 iterations by default; a longer
//     script needs agents.WithMaxIterations.
package langchaintest
