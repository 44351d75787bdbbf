package httpsend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/httpsend"
	"github.com/retrysafe/retrysafe/envelope"
)

// invoiceAPI is a destination on loopback that acts on every POST it
// reads. A keyed one applies each Idempotency-Key once and answers a
// repeat with the first response and Idempotent-Replayed: true; one that
// is not keyed ignores the header (a chat API: every POST is a message).
// With drop set, it drops the connection of the first POST it reads,
// after acting on it: the response is lost.
type invoiceAPI struct {
	keyed, drop bool

	mu      sync.Mutex
	effects int
	keys    map[string]bool
	posts   int
}

// connKey is the context key under which the server keeps a request's
// connection.
type connKey struct{}

// How startAPI serves: HTTP/1.1 in the clear or over TLS, or HTTP/2 over
// TLS.
const (
	plainHTTP1 = iota
	tlsHTTP1
	tlsHTTP2
)

// startAPI serves api as mode says, and returns the server and the
// transport its certificate is trusted by.
func startAPI(t *testing.T, api *invoiceAPI, mode int) (*httptest.Server, *http.Transport) {
	t.Helper()
	api.keys = map[string]bool{}
	srv := httptest.NewUnstartedServer(api)
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	if mode == plainHTTP1 {
		srv.Start()
	} else {
		srv.EnableHTTP2 = mode == tlsHTTP2
		srv.StartTLS()
	}
	t.Cleanup(srv.Close)
	return srv, srv.Client().Transport.(*http.Transport)
}

func (api *invoiceAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusNoContent) // a read: the keep-alive connection's first request
		return
	}
	io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	api.mu.Lock()
	api.posts++
	drop := api.drop && api.posts == 1
	replayed := api.keyed && key != "" && api.keys[key]
	if !replayed {
		api.effects++
		api.keys[key] = true
	}
	api.mu.Unlock()
	if drop {
		// Acted; the connection goes before the response does.
		r.Context().Value(connKey{}).(net.Conn).Close()
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"number":"INV-1001"}`)
}

func (api *invoiceAPI) count() int {
	api.mu.Lock()
	defer api.mu.Unlock()
	return api.effects
}

type invoiceRequest struct {
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

type invoice struct {
	Number string `json:"number"`
}

// createInvoice is a tool written the documented way
// (docs/writing-tools.md): a client whose Transport is an
// httpsend.Transport, the request reference as the Idempotency-Key,
// httpsend.Check for the status, and DestinationReplayed when the API says
// it replayed.
func createInvoice(client *http.Client, url string) func(context.Context, invoiceRequest) (invoice, error) {
	return func(ctx context.Context, in invoiceRequest) (invoice, error) {
		body, err := json.Marshal(in)
		if err != nil {
			return invoice{}, envelope.MarkDefinite(err, "bad_request")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/invoices", bytes.NewReader(body))
		if err != nil {
			return invoice{}, envelope.MarkDefinite(err, "bad_request")
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", agenttool.RequestRef(ctx))
		resp, err := client.Do(req)
		if err != nil {
			return invoice{}, err
		}
		defer resp.Body.Close()
		if err := httpsend.Check(resp); err != nil {
			return invoice{}, err
		}
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			agenttool.DestinationReplayed(ctx)
		}
		var out invoice
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return invoice{}, envelope.MarkUnknown(fmt.Errorf("reading the response: %w", err))
		}
		return out, nil
	}
}

// warmUp makes one request with client, so that a client that keeps
// connections alive has one to reuse.
func warmUp(t *testing.T, client *http.Client, url string) {
	t.Helper()
	resp, err := client.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
