package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"

	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/envelope"
)

// The prompt, and the scripted model's first call.
const (
	prompt     = "Invoice ACME Corp for 3 hours of consulting at 120 EUR an hour, then tell #billing."
	invoiceFor = `{"customer":"ACME Corp","description":"Consulting, 3 hours at 120.00 EUR","amount_cents":36000,"currency":"EUR"}`
)

// scriptedModel plays a real, imperfect model offline: it creates the
// invoice, posts about it in #billing, and after an unknown outcome calls
// the same tool again, word for word, once — as models do. Each turn
// follows from the envelopes read so far.
func scriptedModel() *langchaintest.Model {
	return langchaintest.Func(func(results []string) (langchaintest.Turn, error) {
		if len(results) == 0 {
			return langchaintest.Call("create_invoice", invoiceFor), nil
		}
		var last envelope.Envelope
		var created *invoice // the invoice, once the model has read it
		calls := map[string]int{}
		for _, r := range results {
			env, err := envelope.Parse([]byte(r))
			if err != nil {
				return langchaintest.Turn{}, fmt.Errorf("a tool answered something other than an envelope: %w", err)
			}
			if env.Tool == "create_invoice" && env.Status == envelope.Success {
				created = new(invoice)
				if err := json.Unmarshal(env.Result, created); err != nil {
					return langchaintest.Turn{}, fmt.Errorf("the invoice in the envelope: %w", err)
				}
			}
			calls[env.Tool]++
			last = env
		}
		switch {
		case last.Status == envelope.UnknownOutcome && calls[last.Tool] == 1 && last.Tool == "create_invoice":
			return langchaintest.Call("create_invoice", invoiceFor), nil // unsure, it asks again
		case last.Status == envelope.UnknownOutcome && calls[last.Tool] == 1 && created != nil:
			return langchaintest.Call("post_message", announce(*created)), nil // the same
		case last.Tool == "create_invoice" && created != nil:
			return langchaintest.Call("post_message", announce(*created)), nil
		case last.Tool == "post_message" && last.Status == envelope.Success:
			return langchaintest.Final(fmt.Sprintf("Invoice %s is created and #billing has been told.", created.Number)), nil
		case last.Status == envelope.UnknownOutcome && created != nil:
			return langchaintest.Final(fmt.Sprintf("Invoice %s is created. My message to #billing may have been posted; it is being checked (%s), so I will not post it again.",
				created.Number, last.RequestRef)), nil
		case last.Status == envelope.UnknownOutcome:
			return langchaintest.Final(fmt.Sprintf("The invoice may have been created; it is being checked (%s).", last.RequestRef)), nil
		case last.Error != nil:
			return langchaintest.Final(fmt.Sprintf("I could not finish: %s said %s.", last.Tool, last.Error.Message)), nil
		}
		return langchaintest.Turn{}, fmt.Errorf("no turn for the envelope %s", last)
	})
}

// announce is the model's post_message call about an invoice.
func announce(inv invoice) string {
	text := fmt.Sprintf("Invoice %s sent to %s: %.2f %s.", inv.Number, inv.Customer, float64(inv.AmountCents)/100, inv.Currency)
	args, _ := json.Marshal(messageRequest{Channel: "billing", Text: text})
	return string(args)
}

// openAIModel is langchaingo's OpenAI client, configured from the
// environment: OPENAI_API_KEY, and OPENAI_BASE_URL and OPENAI_MODEL for any
// OpenAI-compatible server (Ollama, vLLM).
func openAIModel(getenv func(string) string) (llms.Model, error) {
	key := getenv("OPENAI_API_KEY")
	if key == "" {
		return nil, errors.New("-llm openai needs OPENAI_API_KEY (and OPENAI_BASE_URL for an OpenAI-compatible server such as Ollama or vLLM)")
	}
	opts := []openai.Option{openai.WithToken(key), openai.WithModel("gpt-4o-mini")}
	if url := getenv("OPENAI_BASE_URL"); url != "" {
		opts = append(opts, openai.WithBaseURL(url))
	}
	if model := getenv("OPENAI_MODEL"); model != "" {
		opts = append(opts, openai.WithModel(model))
	}
	return openai.New(opts...)
}
