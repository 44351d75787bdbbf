package demo

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
	"github.com/retrysafe/retrysafe/agenttool/httpsend"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// BookingFaults are the faults of the booking examples; the first is the
// default.
var BookingFaults = []Fault{
	{Name: "lost-response", Help: "the service commits the booking, then drops the connection before responding"},
	{Name: "none", Help: "everything works"},
	{Name: "unavailable", Help: "the service answers 503 twice, then works"},
	{Name: "slow", Help: "the service commits after the client's timeout"},
}

// BookingRequest is book_flight's input.
type BookingRequest struct {
	Flight    string `json:"flight" desc:"flight number, e.g. TP1234"`
	Date      string `json:"date" desc:"departure date, YYYY-MM-DD"`
	Passenger string `json:"passenger" desc:"passenger's full name"`
}

// bookingAttemptTimeout is the client's patience per attempt; the slow
// fault commits after it.
const bookingAttemptTimeout = 400 * time.Millisecond

// SetupBooking starts the booking service with env's fault and builds the
// guarded book_flight tool over it (see [NewBookTool]), in a bbolt store at
// env.DB. It is the Setup of the booking examples.
func SetupBooking(ctx context.Context, env *Env) (*Scenario, error) {
	return SetupBookingWith(ctx, env, func(context.Context) (agenttool.Store, func(), error) {
		store, err := boltstore.Open(env.DB, nil)
		if err != nil {
			return nil, nil, err
		}
		return store, func() { store.Close() }, nil
	}, agenttool.Options{})
}

// SetupBookingWith is [SetupBooking] with the store open opens, and opts
// (its Store set from open) for book_flight.
func SetupBookingWith(ctx context.Context, env *Env, open func(context.Context) (agenttool.Store, func(), error), opts agenttool.Options) (*Scenario, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(env.Out, "  "+format+"\n", args...) }
	svc, err := StartBookingService(env.Fault, 2*bookingAttemptTimeout, logf)
	if err != nil {
		return nil, err
	}
	store, closeStore, err := open(ctx)
	if err != nil {
		svc.Close()
		return nil, err
	}
	opts.Store = store
	tool, err := NewBookTool(svc.URL, &http.Client{Transport: &httpsend.Transport{}}, logf, opts)
	if err != nil {
		closeStore()
		svc.Close()
		return nil, err
	}
	return &Scenario{
		Tools:   []*agenttool.Tool{tool},
		Effects: svc.Count,
		Final:   func(w io.Writer) { fmt.Fprintf(w, "bookings: %d\n", svc.Count()) },
		Close:   func() { closeStore(); svc.Close() },
	}, nil
}

// NewBookTool returns the guarded book_flight tool, booking through the
// service at url with client: keyed (it sends the request reference as the
// Idempotency-Key, so a retry after a lost or late response is answered
// with the booking already made) and fenced (the claim's token is the
// Fencing-Token, so the service refuses a request from a holder whose
// claim was taken over), with a reconciler that asks the service by key.
// client sends through an httpsend.Transport, so that each attempt is one
// request at most; a status that is not 2xx is an envelope.HTTPError (a
// 422 is definite, a 409 or 503 transient). opts gives the store (and, in
// tests, the clock); the rest is set here.
func NewBookTool(url string, client *http.Client, logf func(string, ...any), opts agenttool.Options) (*agenttool.Tool, error) {
	book := func(ctx context.Context, in BookingRequest) (Booking, error) {
		body, _ := json.Marshal(in)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/bookings", bytes.NewReader(body))
		if err != nil {
			return Booking{}, envelope.MarkDefinite(err, "bad_request")
		}
		info, _ := agenttool.CallInfoFrom(ctx)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", info.RequestRef)
		req.Header.Set(fencingHeader, strconv.FormatUint(info.Token, 10))
		resp, err := client.Do(req)
		if err != nil {
			logf("http client: %v", err)
			return Booking{}, err // dial errors are transient; timeouts and resets unknown
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusPreconditionFailed {
			// This attempt was refused and did nothing: another call holds
			// the booking now, under a newer claim.
			logf("http client: 412, this call's claim was taken over")
			return Booking{}, envelope.MarkDefinite(errStaleHolder, "stale_holder")
		}
		if resp.StatusCode/100 != 2 {
			var e struct{ Error string }
			json.Unmarshal(data, &e)
			logf("http client: %d %s", resp.StatusCode, e.Error)
			return Booking{}, &envelope.HTTPError{StatusCode: resp.StatusCode, Method: http.MethodPost, Message: e.Error}
		}
		var b Booking
		if err := json.Unmarshal(data, &b); err != nil {
			return Booking{}, envelope.MarkUnknown(fmt.Errorf("unreadable response: %w", err))
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
	opts.AttemptTimeout = bookingAttemptTimeout
	opts.Retry = agenttool.RetryPolicy{MaxAttempts: 6, InitialInterval: 150 * time.Millisecond, MaxInterval: 400 * time.Millisecond}
	return agenttool.New("book_flight", "Book one seat on a flight. Input: a JSON object with flight, date and passenger.", book, opts)
}

// errStaleHolder is a booking refused because the call's claim was taken
// over.
var errStaleHolder = errors.New("the booking service refused this request: another call for this booking has taken it over since (a newer fencing token); this request booked nothing")
