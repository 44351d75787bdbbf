package agenttool_test

import (
	"context"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
)

type MailOptions struct {
	ReplyTo *string `json:"reply_to"` // optional: null or absent means none
}

type emailWithOptions struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	*MailOptions
}

// Regression: with an embedded pointer struct, an added "null" for an optional
// pointer field (documented as "null pointer = absent") allocates the
// embedded struct; the re-encoded value differs, so the key differs and the
// same email goes out twice.
func TestNullForAnEmbeddedPointerFieldIsAbsent(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	send := func(ctx context.Context, in emailWithOptions) (string, error) {
		replyTo := ""
		if in.MailOptions != nil && in.ReplyTo != nil {
			replyTo = *in.ReplyTo
		}
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, in.To+"|"+in.Subject+"|"+replyTo)
		return "ok", nil
	}
	tool, err := agenttool.New("send_email", "Send an email.", send, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
	if err != nil {
		t.Fatal(err)
	}
	a := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch"}`)
	b := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch","reply_to":null}`)
	t.Logf("a: %s\nb: %s", a, b)
	if len(sent) > 1 {
		t.Fatalf("the tool saw %q: the same email twice (refs %s, %s)", sent, a.RequestRef, b.RequestRef)
	}
}
