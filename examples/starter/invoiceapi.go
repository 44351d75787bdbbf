package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
)

// This file is the world outside your program: an invoicing API. In your
// project it is Stripe, your ERP, or your own service.

// invoice is one invoice the API created.
type invoice struct {
	Number      string `json:"number"`
	Customer    string `json:"customer"`
	Description string `json:"description"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// invoiceAPI is an HTTP invoicing API on loopback that honours the
// Idempotency-Key header, as Stripe's does: the first POST /invoices with a
// key creates the invoice; a repeat with the same key and body gets the
// first response again (Idempotent-Replayed: true), a repeat with another
// body gets 422. With loseFirst, it loses its first response after
// creating the invoice.
type invoiceAPI struct {
	srv       *httptest.Server
	log       func(format string, args ...any)
	loseFirst bool

	mu       sync.Mutex
	invoices []invoice
	byKey    map[string]keyed // Idempotency-Key → what was answered
	posts    int
}

type keyed struct {
	body     [32]byte // digest of the request body
	response []byte
}

func startInvoiceAPI(loseFirst bool, log func(string, ...any)) *invoiceAPI {
	api := &invoiceAPI{log: log, loseFirst: loseFirst, byKey: map[string]keyed{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /invoices", api.create)
	api.srv = httptest.NewServer(mux) // 127.0.0.1, a free port
	return api
}

func (api *invoiceAPI) url() string { return api.srv.URL }
func (api *invoiceAPI) close()      { api.srv.Close() }

// count returns how many invoices exist.
func (api *invoiceAPI) count() int {
	api.mu.Lock()
	defer api.mu.Unlock()
	return len(api.invoices)
}

func (api *invoiceAPI) create(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var in invoice
	if err != nil || key == "" || json.Unmarshal(body, &in) != nil || in.Customer == "" || in.AmountCents <= 0 {
		http.Error(w, `{"error":"an Idempotency-Key header and a JSON invoice with customer and amount_cents are required"}`, http.StatusBadRequest)
		return
	}
	digest := sha256.Sum256(body)

	api.mu.Lock()
	api.posts++
	lose := api.loseFirst && api.posts == 1
	seen, ok := api.byKey[key]
	switch {
	case ok && seen.body != digest:
		api.mu.Unlock()
		api.log("invoice api: Idempotency-Key %s came back with another body: 422", short(key))
		http.Error(w, `{"error":"Idempotency-Key reused with another request"}`, http.StatusUnprocessableEntity)
		return
	case ok:
		api.mu.Unlock()
		api.log("invoice api: Idempotency-Key %s seen before: replaying its response", short(key))
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusCreated, seen.response)
		return
	}
	in.Number = fmt.Sprintf("INV-%d", 1001+len(api.invoices))
	api.invoices = append(api.invoices, in)
	response, _ := json.Marshal(in)
	api.byKey[key] = keyed{body: digest, response: response}
	api.mu.Unlock()
	api.log("invoice api: created %s for %s (Idempotency-Key %s)", in.Number, in.Customer, short(key))

	if lose {
		api.log("invoice api: ...and the response is lost")
		dropConnection(w)
		return
	}
	writeJSON(w, http.StatusCreated, response)
}

// writeJSON answers with a JSON body.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// dropConnection closes the connection without a response: what the client
// sees when a response is lost on the way back.
func dropConnection(w http.ResponseWriter) {
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close()
	}
}

// short abbreviates a request reference for the log: "post_message/abcd1234…".
func short(ref string) string {
	for i := 0; i < len(ref); i++ {
		if ref[i] == '/' && len(ref) > i+9 {
			return ref[:i+9] + "…"
		}
	}
	return ref
}
