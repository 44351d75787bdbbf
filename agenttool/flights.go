package agenttool

import "sync"

// flights lets calls in this process that wait for a key learn at once when
// the call holding it finishes. Entries live only while a holder runs, so the
// map drains when calls end; a channel is made only when someone waits.
// Calls in other processes are seen by polling.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done chan struct{} // made by the first waiter
}

// begin marks key as held by the caller; end must be called when it is done.
func (f *flights) begin(key string) *flight {
	fl := &flight{}
	f.mu.Lock()
	if f.m == nil {
		f.m = make(map[string]*flight)
	}
	f.m[key] = fl
	f.mu.Unlock()
	return fl
}

// end ends a flight begun for key.
func (f *flights) end(key string, fl *flight) {
	f.mu.Lock()
	if f.m[key] == fl {
		delete(f.m, key)
	}
	if fl.done != nil {
		close(fl.done)
	}
	fl.done = closedChan
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
