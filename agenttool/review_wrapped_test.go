package agenttool_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// jsonMailer is an ordinary langchaingo tool: it reads its input with
// encoding/json into a struct, as almost every Go tool does.
type jsonMailer struct {
	mu   *sync.Mutex
	sent *[]string
}

func (jsonMailer) Name() string        { return "send_email" }
func (jsonMailer) Description() string { return "Send an email." }
func (j jsonMailer) Call(ctx context.Context, in string) (string, error) {
	var e struct {
		To      string `json:"to"`
		Subject string `json:"subject"`
	}
	if err := json.Unmarshal([]byte(in), &e); err != nil {
		return "", envelope.MarkDefinite(err, "invalid_input")
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	*j.sent = append(*j.sent, e.To+"|"+e.Subject)
	return `{"ok":true}`, nil
}

// Regression: for a wrapped tool, model-chosen content the tool ignores (a null
// member, an unlisted "nonce", an idempotency key spelled with a lookalike
// letter the skeleton does not map) makes a new request_ref, and the same
// email goes out again.
func TestWrappedToolKeyIgnoresWhatTheModelAdds(t *testing.T) {
	for _, variant := range []string{
		`{"to":"ana@example.com","subject":"Lunch","cc":null}`,
		`{"to":"ana@example.com","subject":"Lunch","nonce":"2"}`,
		`{"to":"ana@example.com","subject":"Lunch","ɪdempotency_key":"retry-2"}`, // U+026A LATIN LETTER SMALL CAPITAL I
		`{"to":"ana@example.com","subject":"Lunch","idempօtency_key":"retry-2"}`, // U+0585 ARMENIAN SMALL LETTER OH
		`{"to":"ana@example.com","subject":"Lunch","rеquest_іd":"retry-2"}`,      // Cyrillic е, і: caught? (control)
	} {
		var mu sync.Mutex
		var sent []string
		tool, err := agenttool.Wrap(jsonMailer{&mu, &sent}, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
			IdentifyingFields: []string{"to", "subject"}})
		if err != nil {
			t.Fatal(err)
		}
		first := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch"}`)
		mustStatus(t, first, envelope.Success)
		again := tool.Invoke(scoped(), variant)
		if len(sent) > 1 {
			t.Errorf("%s\n  -> %s\n  the tool saw %q: one action sent %d times", variant, again, sent, len(sent))
		} else {
			t.Logf("held: %s -> %s", variant, again.Error)
		}
	}
}
