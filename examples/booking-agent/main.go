// Command booking-agent: an agent books one seat through an HTTP booking API
// on loopback that honours Idempotency-Key, with retrysafe guarding the
// booking.
//
// The book_flight tool is keyed: it sends the request reference as the
// Idempotency-Key, so a retry after a lost or late response is answered with
// the booking already made, never a second one.
//
//	go run ./examples/booking-agent                      # offline, fault lost-response
//	go run ./examples/booking-agent -fault slow
//	go run ./examples/booking-agent -h                   # flags and faults
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
	"github.com/retrysafe/retrysafe/reconcile"
)

var example = demo.Example{
	Name: "booking-agent",
	Faults: []demo.Fault{
		{Name: "lost-response", Help: "the service commits the booking, then drops the connection before responding"},
		{Name: "none", Help: "everything works"},
		{Name: "unavailable", Help: "the service answers 503 twice, then works"},
		{Name: "slow", Help: "the service commits after the client's timeout"},
	},
	Prompt:    "Book Ana Lima on TP1234 on 12 December.",
	Principal: "tenant-42/user-7",
	Session:   "conversation-12",
	Setup:     setup,
	Script:    demo.BookFlight,
}

func main() { demo.Main(example) }

type bookingRequest struct {
	Flight    string `json:"flight" desc:"flight number, e.g. TP1234"`
	Date      string `json:"date" desc:"departure date, YYYY-MM-DD"`
	Passenger string `json:"passenger" desc:"passenger's full name"`
}

// attemptTimeout is the client's patience per attempt; the slow fault
// commits after it.
const attemptTimeout = 400 * time.Millisecond

func setup(ctx context.Context, env *demo.Env) (*demo.Scenario, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(env.Out, "  "+format+"\n", args...) }
	svc, err := startBookingService(env.Fault, 2*attemptTimeout, logf)
	if err != nil {
		return nil, err
	}
	store, err := boltstore.Open(env.DB, nil)
	if err != nil {
		svc.close()
		return nil, err
	}
	client := &http.Client{}
	book := func(ctx context.Context, in bookingRequest) (booking, error) {
		body, _ := json.Marshal(in)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, svc.url+"/bookings", bytes.NewReader(body))
		if err != nil {
			return booking{}, envelope.MarkDefinite(err, "bad_request")
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", agenttool.RequestRef(ctx))
		resp, err := client.Do(req)
		if err != nil {
			logf("http client: %v", err)
			return booking{}, err // dial errors are transient; timeouts and resets unknown
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			var e struct{ Error string }
			json.Unmarshal(data, &e)
			logf("http client: %d %s", resp.StatusCode, e.Error)
			return booking{}, &envelope.HTTPError{StatusCode: resp.StatusCode, Method: http.MethodPost, Message: e.Error}
		}
		var b booking
		if err := json.Unmarshal(data, &b); err != nil {
			return booking{}, envelope.MarkUnknown(fmt.Errorf("unreadable response: %w", err))
		}
		return b, nil
	}
	// Operators and the sweeper ask the service by key.
	status := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, svc.url+"/bookings/by-key/"+url.PathEscape(ref), nil)
		resp, err := client.Do(req)
		if err != nil {
			return reconcile.CantSayBecause(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		switch resp.StatusCode {
		case http.StatusOK:
			return reconcile.AppliedWith(data)
		case http.StatusNotFound:
			return reconcile.NotAppliedYet()
		case http.StatusConflict:
			return reconcile.StillPending()
		}
		return reconcile.CantSayBecause(&envelope.HTTPError{StatusCode: resp.StatusCode, Method: http.MethodGet})
	})
	tool, err := agenttool.New("book_flight", "Book one seat on a flight. Input: a JSON object with flight, date and passenger.", book, agenttool.Options{
		Store:          store,
		Class:          agenttool.Keyed,
		Reconciler:     status,
		AttemptTimeout: attemptTimeout,
		Retry:          agenttool.RetryPolicy{MaxAttempts: 6, InitialInterval: 150 * time.Millisecond, MaxInterval: 400 * time.Millisecond},
	})
	if err != nil {
		store.Close()
		svc.close()
		return nil, err
	}
	return &demo.Scenario{
		Tools:   []*agenttool.Tool{tool},
		Effects: svc.count,
		Final:   func(w io.Writer) { fmt.Fprintf(w, "bookings: %d\n", svc.count()) },
		Close:   func() { store.Close(); svc.close() },
	}, nil
}
