package agenttool

import (
	"errors"
	"sync"
	"time"
)

// flights tracks the calls of one tool that hold a key in this process, from
// their claim until their outcome is recorded. It does two things for them:
//
//   - a call waiting for the same key learns at once when the holder ends (a
//     channel is made only when someone waits); calls in other processes are
//     seen by polling;
//   - each holder's lease is renewed every third of a lease while it holds
//     the key (while it runs the tool, asks a reconciler or waits between
//     attempts), so that a slow but live call is not presumed dead. A quick
//     call costs one timer, stopped when it ends.
//
// Entries live only while a holder runs, so the map drains when calls end.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one holder's entry; it lives in its call.
type flight struct {
	c     *call
	done  chan struct{} // made by the first waiter
	timer *time.Timer   // renews the lease
	ended bool          // no more renewals
}

// begin marks c's key as held by c until end, and keeps its lease.
func (f *flights) begin(c *call) {
	fl := &c.fl
	f.mu.Lock()
	*fl = flight{c: c}
	if f.m == nil {
		f.m = make(map[string]*flight)
	}
	f.m[c.ref] = fl
	fl.timer = time.AfterFunc(c.t.cfg.Lease/3, fl.renew)
	f.mu.Unlock()
}

// end ends c's flight: waiters wake and its lease is no longer renewed.
func (f *flights) end(c *call) {
	fl := &c.fl
	f.mu.Lock()
	if f.m[c.ref] == fl {
		delete(f.m, c.ref)
	}
	if fl.done != nil {
		close(fl.done)
	}
	fl.done, fl.ended = closedChan, true
	fl.timer.Stop()
	f.mu.Unlock()
}

// quiet stops renewing c's lease before the call gives its key back; the
// flight goes on until end.
func (f *flights) quiet(c *call) {
	f.mu.Lock()
	c.fl.ended = true
	c.fl.timer.Stop()
	f.mu.Unlock()
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// done returns a channel closed when the current holder of key ends, or nil
// if no call in this process holds it.
func (f *flights) done(key string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.m[key]
	if fl == nil {
		return nil
	}
	if fl.done == nil {
		fl.done = make(chan struct{})
	}
	return fl.done
}

func (f *flights) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}

// renew renews the flight's lease and arms the next renewal, unless the
// flight has ended or the lease was taken over. A renewal runs on a context
// bounded by StoreTimeout; one that lands after the call has recorded its
// outcome fails harmlessly, since only a pending record held by the call's
// token can be renewed.
func (fl *flight) renew() {
	c := fl.c
	cfg := c.t.cfg
	ctx, cancel := c.outcomeCtx()
	err := cfg.Store.Renew(ctx, c.ref, c.token, cfg.Now().Add(cfg.Lease))
	cancel()
	f := &c.t.flights
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl.ended {
		return
	}
	if err != nil {
		cfg.logger.Warn("retrysafe: lease renewal failed", "ref", c.ref, "err", err)
		if errors.Is(err, ErrFenced) {
			return // taken over: the holder learns of it when it records its outcome
		}
	}
	fl.timer.Reset(cfg.Lease / 3)
}
