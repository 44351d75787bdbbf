package mcptool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// serverKind is an MCP server behind the proxy.
type serverKind struct {
	name      string
	envelopes bool // a retrysafe server (mcptool.Register), or a plain one
	stateless bool
}

var serverKinds = []serverKind{
	{"retrysafe, stateful", true, false},
	{"retrysafe, stateless", true, true},
	{"plain, stateful", false, false},
	{"plain, stateless", false, true},
}

// duplicates reports whether the proxy's fault makes a plain server run
// one request twice: a destination without a key cannot be helped by any
// client when a proxy resends on its own.
func (k serverKind) duplicates(f fault) bool {
	if k.envelopes {
		return false
	}
	switch f {
	case retryAfterTimeout:
		return true // the first copy is over: the second is a new request to the server
	case duplicateDelivery, sessionLossAfter:
		return k.stateless // no session to refuse the second copy
	}
	return false
}

// Through a proxy that delivers a call twice, retries it after its own
// timeout, loses its answer or loses the server's session, in front of
// retrysafe and plain servers, stateful and stateless, for every class
// that writes: the model's call, then its reworded call if the first was
// not a success, then the first once more, leave at most one booking, and
// every envelope says what the destination counted.
func TestClient_OneBookingThroughAnyProxyFault(t *testing.T) {
	faultsTried := []fault{duplicateDelivery, retryAfterTimeout, dropResponse, sessionLossBefore, sessionLossAfter}
	for _, kind := range serverKinds {
		for _, f := range faultsTried {
			if kind.duplicates(f) {
				continue
			}
			for _, class := range []agenttool.Class{agenttool.Keyed, agenttool.Reconcilable, agenttool.AtMostOnce} {
				if class == agenttool.Keyed && !kind.envelopes {
					continue // refused: nothing says a plain server replays a resent call
				}
				t.Run(fmt.Sprintf("%s/%s/%v", kind.name, f, class), func(t *testing.T) {
					oneBookingThrough(t, kind, f, class)
				})
			}
		}
	}
}

func oneBookingThrough(t *testing.T, kind serverKind, f fault, class agenttool.Class) {
	d := &desk{}
	var server *mcp.Server
	if kind.envelopes {
		server = newServed(t, d, agenttool.Options{}, nil).server
	} else {
		server = plainServer(d, nil)
	}
	p := &proxy{backends: replicas(server, kind.stateless), fault: f}
	if f == duplicateDelivery && !kind.stateless {
		// The second copy arrives while the first is in the tool.
		d.hold, d.entered = make(chan struct{}), make(chan struct{})
		p.between = func() { <-d.entered }
		p.afterSecond = func() { close(d.hold) }
	}
	dial := dialHTTP(t, newProxy(t, p), "tok-ana")
	cs, err := dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	opts := agenttool.Options{Store: memstore.New(), Class: class, Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond}}
	if class == agenttool.Reconcilable {
		// A truthful reconciler: the desk knows which client reference
		// each booking was made for, and the proxy what is in flight.
		opts.Reconciler = reconcile.Func(func(_ context.Context, ref string) reconcile.Answer {
			if b, ok := d.bookedFor(ref); ok {
				out, _ := json.Marshal(b)
				return reconcile.AppliedWith(out)
			}
			if p.inFlight.Load() > 0 {
				return reconcile.StillPending()
			}
			return reconcile.NotAppliedYet()
		})
	}
	tools, err := mcptool.Tools(context.Background(), cs, mcptool.ClientOptions{Reconnect: dial, ByName: map[string]agenttool.Options{"book_flight": opts}})
	if err != nil {
		t.Fatal(err)
	}
	book := tools[0]

	var envs []envelope.Envelope
	var after []int
	call := func(input string) envelope.Envelope {
		env := book.Invoke(agentCtx(), input)
		p.settle()
		envs, after = append(envs, env), append(after, d.count())
		return env
	}
	first := call(anaSeat)
	if first.Status != envelope.Success {
		call(anaReworded)
	}
	call(anaSeat)
	if class == agenttool.Keyed && first.Status != envelope.Success {
		t.Errorf("a keyed client over a retrysafe server answered %s; want a success: a resend under its key is safe", first)
	}
	for i, env := range envs {
		before := 0
		if i > 0 {
			before = after[i-1]
		}
		if err := env.Validate(); err != nil {
			t.Errorf("envelope %d is invalid: %v", i, err)
		}
		switch {
		case env.Status == envelope.Success && after[i] != 1:
			t.Errorf("envelope %d %s: a success, with %d bookings", i, env, after[i])
		case env.Status == envelope.DefiniteFailure && after[i] != before:
			t.Errorf("envelope %d %s: a definite failure, and the bookings went from %d to %d", i, env, before, after[i])
		case env.Replayed && i == 0:
			t.Errorf("envelope %d %s: replayed, but this call's own request made the booking", i, env)
		}
	}
	if n := d.count(); n > 1 {
		t.Errorf("%d bookings for one action; envelopes %v", n, envs)
	}
}
