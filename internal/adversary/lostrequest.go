package adversary

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/httpsend"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// LostRequest is the fault [WithLostRequests] adds to a booking example.
const LostRequest = "lost-request"

// WithLostRequests returns a booking example (one whose Setup is
// demo.SetupBooking) with one more fault, LostRequest: the network loses
// the first n booking requests on their way to the service, and the
// client reads a reset connection after sending each, so that it cannot
// tell whether the booking was made. With n at least the tool's attempts
// per call, the first call's outcome is unknown and the service, asked
// afterwards, has never heard of it: the one fault of the booking
// examples after which an unknown action is found not applied.
func WithLostRequests(ex demo.Example, n int) demo.Example {
	ex.Faults = append(ex.Faults[:len(ex.Faults):len(ex.Faults)], demo.Fault{Name: LostRequest, Help: fmt.Sprintf("the network loses the first %d booking requests", n)})
	setup := ex.Setup
	ex.Setup = func(ctx context.Context, env *demo.Env) (*demo.Scenario, error) {
		if env.Fault != LostRequest {
			return setup(ctx, env)
		}
		logf := func(format string, args ...any) { fmt.Fprintf(env.Out, "  "+format+"\n", args...) }
		svc, err := demo.StartBookingService("none", 0, logf)
		if err != nil {
			return nil, err
		}
		store, err := boltstore.Open(env.DB, nil)
		if err != nil {
			svc.Close()
			return nil, err
		}
		client := &http.Client{Transport: &losing{base: &httpsend.Transport{}, left: n, log: logf}}
		tool, err := demo.NewBookTool(svc.URL, client, logf, agenttool.Options{Store: store})
		if err != nil {
			store.Close()
			svc.Close()
			return nil, err
		}
		return &demo.Scenario{
			Tools:   []*agenttool.Tool{tool},
			Effects: svc.Count,
			Final:   func(w io.Writer) { fmt.Fprintf(w, "bookings: %d\n", svc.Count()) },
			Close:   func() { store.Close(); svc.Close() },
		}, nil
	}
	return ex
}

// losing is a transport that loses the first booking requests (POST) it
// is given: they never reach the service, and the client reads a reset.
type losing struct {
	base http.RoundTripper
	log  func(string, ...any)

	mu   sync.Mutex
	left int
}

func (l *losing) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	lose := r.Method == http.MethodPost && l.left > 0
	if lose {
		l.left--
	}
	l.mu.Unlock()
	if !lose {
		return l.base.RoundTrip(r)
	}
	if r.Body != nil {
		r.Body.Close()
	}
	l.log("network: the booking request is lost on its way; the client reads a reset")
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}
