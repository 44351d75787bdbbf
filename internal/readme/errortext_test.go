package readme_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/httpsend"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// safeError is the typed error docs/writing-tools.md recommends: its
// message is safe to show the model, and it wraps the original so that
// its class and code are still found.
type safeError struct {
	msg string
	err error
}

func (e *safeError) Error() string { return e.msg }
func (e *safeError) Unwrap() error { return e.err }

// TestToolErrorTextReachesTheModel holds what "Writing a tool" says: the
// text of a tool's error is what the model reads in error.message, and a
// typed error with a safe message keeps the internal detail out while the
// error keeps its class and code.
func TestToolErrorTextReachesTheModel(t *testing.T) {
	const internal = "POST http://billing.internal:8080/v1/charge"
	refused := envelope.MarkDefinite(fmt.Errorf("%s: 422 card declined", internal), "card_declined")
	lost := fmt.Errorf("%s: %w", internal, io.ErrUnexpectedEOF)
	for _, tc := range []struct {
		name       string
		err        error
		status     envelope.Status
		code       string
		message    string
		leaksInner bool
	}{
		{"definite, returned as it is", refused, envelope.DefiniteFailure, "card_declined", refused.Error(), true},
		{"definite, behind a safe message", &safeError{"the card was declined", refused}, envelope.DefiniteFailure, "card_declined", "the card was declined", false},
		{"unknown, returned as it is", lost, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown, "the outcome is unknown: " + lost.Error(), true},
		{"unknown, behind a safe message", &safeError{"the billing service did not answer", lost}, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown, "the outcome is unknown: the billing service did not answer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			charge, err := agenttool.New("charge_card", "Charge a card.", func(context.Context, struct {
				Card string `json:"card"`
			}) (string, error) {
				return "", tc.err
			}, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
			if err != nil {
				t.Fatal(err)
			}
			ctx := agenttool.WithScope(context.Background(), "tenant-1/user-1", "conversation-1")
			env := charge.Invoke(ctx, `{"card":"4242"}`)
			if env.Status != tc.status || env.Error == nil {
				t.Fatalf("status %s, error %+v; want %s with an error", env.Status, env.Error, tc.status)
			}
			if env.Error.Code != tc.code || env.Error.Message != tc.message {
				t.Errorf("error = {%q, %q}, want {%q, %q}", env.Error.Code, env.Error.Message, tc.code, tc.message)
			}
			if leaked := strings.Contains(env.Error.Message, "billing.internal"); leaked != tc.leaksInner {
				t.Errorf("the model reads %q: internal address shown = %v, want %v", env.Error.Message, leaked, tc.leaksInner)
			}
		})
	}
}

// TestReconcilerErrorTextReachesTheModel holds the same for a reconciler:
// the error it gives with reconcile.CantSayBecause is quoted to the model.
func TestReconcilerErrorTextReachesTheModel(t *testing.T) {
	post, err := agenttool.New("post_message", "Post a message.", func(context.Context, struct {
		Text string `json:"text"`
	}) (string, error) {
		return "", io.ErrUnexpectedEOF
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable,
		Reconciler: reconcile.Func(func(context.Context, string) reconcile.Answer {
			return reconcile.CantSayBecause(errors.New("GET http://search.internal:9200/messages: 503"))
		})})
	if err != nil {
		t.Fatal(err)
	}
	ctx := agenttool.WithScope(context.Background(), "tenant-1/user-1", "conversation-1")
	env := post.Invoke(ctx, `{"text":"hello"}`)
	if env.Status != envelope.UnknownOutcome || env.Error == nil {
		t.Fatalf("status %s, error %+v; want unknown_outcome with an error", env.Status, env.Error)
	}
	if !strings.Contains(env.Error.Message, "http://search.internal:9200/messages: 503") {
		t.Errorf("the model reads %q; want the reconciler's error quoted", env.Error.Message)
	}
}

// TestHTTPStatusReachesTheModelAsItsClass holds what "A tool over HTTP"
// says: a response that is not 2xx, returned as httpsend.Check makes it
// (an envelope.HTTPError), answers by its status, a refusal as a definite
// failure with the API's message; the same status returned as a plain
// error answers unknown_outcome.
func TestHTTPStatusReachesTheModelAsItsClass(t *testing.T) {
	const refusal = `{"error":"amount_cents must be positive"}`
	for _, tc := range []struct {
		name    string
		status  int
		plain   bool // returned as fmt.Errorf, not through httpsend.Check
		want    envelope.Status
		code    string
		message string
	}{
		{"422 through Check", 422, false, envelope.DefiniteFailure, "http_422", "HTTP 422 Unprocessable Entity: " + refusal},
		{"422 as a plain error", 422, true, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown, "the outcome is unknown: create_invoice: HTTP 422"},
		{"503 through Check", 503, false, envelope.DefiniteFailure, envelope.CodeUnavailable, "not applied; the destination is unavailable: HTTP 503 Service Unavailable: " + refusal},
		{"500 through Check", 500, false, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown, "the outcome is unknown: HTTP 500 Internal Server Error: " + refusal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			create, err := agenttool.New("create_invoice", "Create one invoice.", func(context.Context, struct {
				Customer string `json:"customer"`
			}) (string, error) {
				req, _ := http.NewRequest(http.MethodPost, "https://billing.example/invoices", nil)
				resp := &http.Response{StatusCode: tc.status, Request: req, Body: io.NopCloser(strings.NewReader(refusal))}
				if tc.plain {
					return "", fmt.Errorf("create_invoice: HTTP %d", resp.StatusCode)
				}
				return "", httpsend.Check(resp)
			}, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
				Retry: agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := agenttool.WithScope(context.Background(), "tenant-1/user-1", "conversation-1")
			env := create.Invoke(ctx, `{"customer":"ACME Corp"}`)
			if env.Status != tc.want || env.Error == nil || env.Error.Code != tc.code || env.Error.Message != tc.message {
				t.Errorf("answered %s; want %s with {%q, %q}", env, tc.want, tc.code, tc.message)
			}
		})
	}
}
