package httponce_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/retrysafe/retrysafe/agenttool/httponce"
	"github.com/retrysafe/retrysafe/envelope"
)

// A tool's POST through httponce's client, and a refusal told apart from
// an unknown outcome by Check.
func Example() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "unknown-customer") {
			http.Error(w, `{"error":"no such customer"}`, http.StatusUnprocessableEntity)
			return
		}
		io.WriteString(w, `{"invoice":"in_1"}`)
	}))
	defer api.Close()
	client := httponce.Client(nil)
	for _, path := range []string{"/invoices/acme", "/invoices/unknown-customer"} {
		req, _ := http.NewRequest(http.MethodPost, api.URL+path, strings.NewReader(`{"amount":1200}`))
		req.Header.Set("Idempotency-Key", "create_invoice/abc") // a Keyed tool's reference
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			continue
		}
		if err := httponce.Check(resp); err != nil {
			fmt.Printf("%s: %v (%v)\n", path, err, envelope.Classify(err))
		} else {
			body, _ := io.ReadAll(resp.Body)
			fmt.Printf("%s: %s\n", path, body)
		}
		resp.Body.Close()
	}
	// Output:
	// /invoices/acme: {"invoice":"in_1"}
	// /invoices/unknown-customer: HTTP 422 Unprocessable Entity: {"error":"no such customer"} (definite)
}
