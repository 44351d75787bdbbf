package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/httpsend"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// This file is what you write in your project: the two tools, guarded.

// invoiceRequest is create_invoice's input: what the model sends.
type invoiceRequest struct {
	Customer    string `json:"customer" desc:"the customer's name"`
	Description string `json:"description" desc:"what is invoiced"`
	AmountCents int64  `json:"amount_cents" desc:"the total in cents, e.g. 36000 for 360.00"`
	Currency    string `json:"currency" desc:"ISO 4217 code, e.g. EUR"`
}

// messageRequest is post_message's input.
type messageRequest struct {
	Channel string `json:"channel" desc:"the channel's name, without #"`
	Text    string `json:"text" desc:"the message"`
}

// guardedTools are the two guarded tools.
type guardedTools struct {
	createInvoice *agenttool.Tool
	postMessage   *agenttool.Tool
}

// newTools guards the two tools with one store.
//
// create_invoice is Keyed: the invoice API honours the Idempotency-Key
// header, so every attempt of one action sends the same key (the request
// reference), and a retry after a lost response gets the first invoice
// back instead of a second one.
//
// post_message is Reconcilable: the chat API does not deduplicate, but it
// can be searched by the client_msg_id the tool sends (the request
// reference, in the body: not as an Idempotency-Key, which the API would
// ignore). After a lost response, retrysafe never posts again blindly: it
// asks the search first (the Reconciler), and posts again only if the
// search proves the message absent.
//
// Both send through an httpsend.Transport: each attempt is one request at
// most. net/http alone may send a POST again by itself (one with an
// Idempotency-Key header, when a reused connection breaks after it was
// written), and a chat API would post twice.
func newTools(store agenttool.Store, invoiceURL, chatURL string, log func(string, ...any)) (*guardedTools, error) {
	client := &http.Client{Transport: &httpsend.Transport{}}

	createInvoice, err := agenttool.New("create_invoice",
		"Create one invoice. Input: a JSON object with customer, description, amount_cents and currency.",
		func(ctx context.Context, in invoiceRequest) (invoice, error) {
			var inv invoice
			err := postJSON(ctx, client, invoiceURL+"/invoices", agenttool.RequestRef(ctx), in, &inv, log)
			return inv, err
		},
		agenttool.Options{
			Store:          store,
			Class:          agenttool.Keyed,
			AttemptTimeout: 5 * time.Second,
		})
	if err != nil {
		return nil, err
	}

	// search asks the chat API whether the message of one request
	// reference was posted. "Not found" proves nothing while the index is
	// behind: that is Pending, never NotApplied.
	search := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		var res searchResult
		if err := getJSON(ctx, client, chatURL+"/messages/search?client_msg_id="+url.QueryEscape(ref), &res); err != nil {
			return reconcile.CantSayBecause(err)
		}
		switch {
		case len(res.Messages) > 0:
			log("reconciler: found %s with client_msg_id %s: applied", res.Messages[0].ID, short(ref))
			found, _ := json.Marshal(res.Messages[0])
			return reconcile.AppliedWith(found)
		case !res.Complete:
			log("reconciler: no message with client_msg_id %s yet, and the search index is behind: pending", short(ref))
			return reconcile.StillPending()
		}
		log("reconciler: no message with client_msg_id %s, and the index is complete: not applied", short(ref))
		return reconcile.NotAppliedYet()
	})

	postMessage, err := agenttool.New("post_message",
		"Post one message in a chat channel. Input: a JSON object with channel and text.",
		func(ctx context.Context, in messageRequest) (message, error) {
			var m message
			req := message{Channel: in.Channel, Text: in.Text, ClientMsgID: agenttool.RequestRef(ctx)}
			err := postJSON(ctx, client, chatURL+"/messages", "", req, &m, log)
			return m, err
		},
		agenttool.Options{
			Store: store,
			Class: agenttool.Reconcilable,
			// Poll asks again, a little later, while the answer is pending;
			// here the index catches up only after the conversation.
			Reconciler:     reconcile.Poll(search, reconcile.PollOptions{MaxChecks: 2, Interval: 100 * time.Millisecond}),
			AttemptTimeout: 5 * time.Second,
		})
	if err != nil {
		return nil, err
	}
	return &guardedTools{createInvoice: createInvoice, postMessage: postMessage}, nil
}

// postJSON POSTs in as JSON (with an Idempotency-Key header if key is not
// empty) and decodes the response into out. Its errors say what retrysafe
// needs to know: a non-2xx status is an envelope.HTTPError, from
// httpsend.Check (400 and 422 definite, 503 transient, 500 unknown for a
// POST); a lost response is the transport's error, unknown (transient if
// the request was never sent).
func postJSON(ctx context.Context, client *http.Client, url, key string, in, out any, log func(string, ...any)) error {
	body, err := json.Marshal(in)
	if err != nil {
		return envelope.MarkDefinite(err, "bad_request")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return envelope.MarkDefinite(err, "bad_request")
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		err = fmt.Errorf("POST %s: %w", req.URL.Path, cause(err)) // the same error, without the host
		log("http client: %v", err)
		return err
	}
	defer resp.Body.Close()
	if err := httpsend.Check(resp); err != nil {
		return err
	}
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		// The API answered an earlier request's response: if the store's
		// record proves an earlier call's attempt, the envelope says
		// replayed.
		agenttool.DestinationReplayed(ctx)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return envelope.MarkUnknown(fmt.Errorf("reading the response: %w", err)) // it was done
	}
	return nil
}

// getJSON GETs url and decodes the response into out.
func getJSON(ctx context.Context, client *http.Client, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := httpsend.Check(resp); err != nil {
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// cause returns the error inside net/http's *url.Error, which names the
// method and the whole URL.
func cause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
