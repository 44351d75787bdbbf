package langchaintest

import (
	"slices"
	"strings"

	"github.com/tmc/langchaingo/llms"
)

// conversation is what the model reads in one request: every tool result in
// the messages, in order, and how many of them came after its own last
// turn (the results it reads at this turn).
type conversation struct {
	results []string
	fresh   int
}

// readConversation collects the tool results in messages.
func readConversation(messages []llms.MessageContent) conversation {
	var c conversation
	for _, msg := range messages {
		if msg.Role == llms.ChatMessageTypeAI {
			c.fresh = 0 // results before the model's own last turn were read then
		}
		for _, part := range msg.Parts {
			if r, ok := part.(llms.ToolCallResponse); ok {
				c.results = append(c.results, r.Content)
				c.fresh++
			}
		}
	}
	return c
}

// read returns the results read at this turn.
func (c conversation) read() []string { return c.results[len(c.results)-c.fresh:] }

// last returns the result read at this turn, if there is one.
func (c conversation) last() (string, bool) {
	if c.fresh == 0 {
		return "", false
	}
	return c.results[len(c.results)-1], true
}

// offered returns the names of the tools the call options offer the model.
// The functions agent passes them with llms.WithFunctions (deprecated in
// favour of llms.WithTools, which is read too); a later option replaces an
// earlier one, as langchain.WithToolSchemas relies on.
func offered(opts []llms.CallOption) []string {
	var o llms.CallOptions
	for _, opt := range opts {
		opt(&o)
	}
	var names []string
	for _, f := range o.Functions {
		names = append(names, f.Name)
	}
	for _, t := range o.Tools {
		if t.Function != nil {
			names = append(names, t.Function.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// listNames writes names for an error message.
func listNames(names []string) string {
	if len(names) == 0 {
		return "no tools"
	}
	return strings.Join(names, ", ")
}
