package agenttool

import (
	"sync"
	"time"
)

// flights tracks the calls of one tool that hold a key in this process, from
// their claim until their outcome is recorded. A call waiting for the same
// key learns at once when the holder ends (a channel is made only when
// someone waits); calls in other processes are seen by polling. Each
// holder's lease is kept by its keeper meanwhile.
//
// Entries live only while a holder runs, so the map drains when calls end.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one holder's entry; it lives in its call.
type flight struct {
	c    *call
	done chan struct{} // made by the first waiter
	keep keeper
}

// begin marks c's key as held by c until end, and keeps its lease.
func (f *flights) begin(c *call) {
	fl := &c.fl
	f.mu.Lock()
	fl.c, fl.done = c, nil
	if f.m == nil {
		f.m = make(map[string]*flight)
	}
	f.m[c.ref] = fl
	f.mu.Unlock()
	fl.keep.start(c.t, c.ctx, c.ref, c.token, c.leaseUntil, c.stopWork)
}

// end ends c's flight: waiters wake and its lease is no longer renewed.
func (f *flights) end(c *call) {
	fl := &c.fl
	fl.keep.stop()
	f.mu.Lock()
	if f.m[c.ref] == fl {
		delete(f.m, c.ref)
	}
	if fl.done != nil {
		close(fl.done)
	}
	fl.done = closedChan
	f.mu.Unlock()
}

// quiet stops renewing c's lease before the call gives its key back; the
// flight goes on until end.
func (f *flights) quiet(c *call) { c.fl.keep.stop() }

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

// doneIfAlike is done for the holder of key in this process, if it holds
// the key for the same input (fingerprint fp) and keeps its lease at now;
// otherwise nil: a call of other input under the key is refused at once
// (key reuse), and one held by a holder whose renewals are late is told
// at once when its hold ends (in_progress, retry_after), not kept
// waiting.
func (f *flights) doneIfAlike(key string, fp Digest, now time.Time) <-chan struct{} {
	f.mu.Lock()
	fl := f.m[key]
	alike := fl != nil && fl.c.req.Fingerprint == fp
	f.mu.Unlock()
	if !alike || fl.keep.stalled(now) {
		return nil
	}
	return f.done(key)
}

func (f *flights) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}
