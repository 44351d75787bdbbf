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
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
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
	tool, err := newBookTool(svc.url, &http.Client{}, logf, agenttool.Options{Store: store})
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

// newBookTool returns the guarded book_flight tool, booking through the
// service at url with client: keyed (the request reference is the
// Idempotency-Key) and fenced (the claim's token is the Fencing-Token, so
// the service refuses a request from a holder whose claim was taken over).
// opts gives the store (and, in tests, the clock); the rest is set here.
func newBookTool(url string, client *http.Client, logf func(string, ...any), opts agenttool.Options) (*agenttool.Tool, error) {
	book := func(ctx context.Context, in bookingRequest) (booking, error) {
		body, _ := json.Marshal(in)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/bookings", bytes.NewReader(body))
		if err != nil {
			return booking{}, envelope.MarkDefinite(err, "bad_request")
		}
		info, _ := agenttool.CallInfoFrom(ctx)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", info.RequestRef)
		req.Header.Set(fencingHeader, strconv.FormatUint(info.Token, 10))
		resp, err := client.Do(req)
		if err != nil {
			logf("http client: %v", err)
			return booking{}, err // dial errors are transient; timeouts and resets unknown
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusPreconditionFailed {
			// This attempt was refused and did nothing: another call holds
			// the booking now, under a newer claim.
			logf("http client: 412, this call's claim was taken over")
			return booking{}, envelope.MarkDefinite(errStale, "stale_holder")
		}
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
	// Operators, the sweeper and takeovers ask the service by key, with the
	// checker's fencing token: from then on the service refuses every
	// request of an older claim, so its "not found" is final.
	status := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/bookings/by-key/"+neturl.PathEscape(ref), nil)
		if info, ok := agenttool.CallInfoFrom(ctx); ok && info.Token != 0 {
			req.Header.Set(fencingHeader, strconv.FormatUint(info.Token, 10))
		}
		resp, err := client.Do(req)
		if err != nil {
			return reconcile.CantSayBecause(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		switch {
		case resp.StatusCode == http.StatusOK:
			return reconcile.AppliedWith(data)
		case resp.StatusCode == http.StatusNotFound && resp.Header.Get(fencingHeader) != "":
			return reconcile.NotAppliedFenced()
		case resp.StatusCode == http.StatusNotFound:
			return reconcile.NotAppliedYet()
		case resp.StatusCode == http.StatusConflict:
			return reconcile.StillPending()
		}
		return reconcile.CantSayBecause(&envelope.HTTPError{StatusCode: resp.StatusCode, Method: http.MethodGet})
	})
	opts.Class = agenttool.Keyed
	opts.Reconciler = status
	opts.AttemptTimeout = attemptTimeout
	opts.Retry = agenttool.RetryPolicy{MaxAttempts: 6, InitialInterval: 150 * time.Millisecond, MaxInterval: 400 * time.Millisecond}
	return agenttool.New("book_flight", "Book one seat on a flight. Input: a JSON object with flight, date and passenger.", book, opts)
}

// errStale is a booking refused because the call's claim was taken over.
var errStale = errors.New("the booking service refused this request: another call for this booking has taken it over since (a newer fencing token); this request booked nothing")
