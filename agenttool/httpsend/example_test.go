package httpsend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/httpsend"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// A keyed tool over HTTP: each attempt sends its request once, with the
// request reference as the Idempotency-Key, and the API's refusal (a 422)
// is a definite failure the model can fix, not an unknown outcome.
func Example() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			AmountCents int64 `json:"amount_cents"`
		}
		if json.NewDecoder(r.Body).Decode(&in) != nil || in.AmountCents <= 0 {
			http.Error(w, `{"error":"amount_cents must be positive"}`, http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"number":"INV-1001"}`)
	}))
	defer api.Close()

	type invoiceRequest struct {
		Customer    string `json:"customer"`
		AmountCents int64  `json:"amount_cents"`
	}
	type invoice struct {
		Number string `json:"number"`
	}
	client := &http.Client{Transport: &httpsend.Transport{}}
	createInvoice := func(ctx context.Context, in invoiceRequest) (invoice, error) {
		body, err := json.Marshal(in)
		if err != nil {
			return invoice{}, envelope.MarkDefinite(err, "bad_request")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/invoices", bytes.NewReader(body))
		if err != nil {
			return invoice{}, envelope.MarkDefinite(err, "bad_request")
		}
		req.Header.Set("Idempotency-Key", agenttool.RequestRef(ctx)) // keyed: the API honours it
		resp, err := client.Do(req)
		if err != nil {
			return invoice{}, err // transient if it was not sent, unknown if it was
		}
		defer resp.Body.Close()
		if err := httpsend.Check(resp); err != nil {
			return invoice{}, err // a 422 is definite, a 503 transient, a 500 unknown
		}
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			agenttool.DestinationReplayed(ctx)
		}
		var out invoice
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return invoice{}, envelope.MarkUnknown(err) // it was done; its answer is unreadable
		}
		return out, nil
	}

	tool, err := agenttool.New("create_invoice", "Create one invoice.", createInvoice,
		agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	if err != nil {
		panic(err)
	}
	ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")
	for _, input := range []string{
		`{"customer":"ACME Corp","amount_cents":-36000}`,
		`{"customer":"ACME Corp","amount_cents":36000}`,
	} {
		env := tool.Invoke(ctx, input)
		if env.Error != nil {
			fmt.Println(env.Status, env.Next, env.Error.Code, env.Error.Message)
			continue
		}
		fmt.Println(env.Status, env.Next, string(env.Result))
	}
	// Output:
	// definite_failure do_not_retry http_422 HTTP 422 Unprocessable Entity: {"error":"amount_cents must be positive"}
	// success continue {"number":"INV-1001"}
}
