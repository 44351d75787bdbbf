package agenttool

import "sync"

// flights lets calls in this process that wait for a key learn at once when
// the call holding it finishes. Entries live only while a holder runs, so the
// map drains when calls end. Calls in other processes are seen by polling.
type flights struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// begin marks key as held by the caller and returns the function that ends it.
func (f *flights) begin(key string) (end func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	if f.m == nil {
		f.m = make(map[string]chan struct{})
	}
	f.m[key] = ch
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		if f.m[key] == ch {
			delete(f.m, key)
		}
		f.mu.Unlock()
		close(ch)
	}
}

// done returns a channel closed when the current holder of key ends, or nil
// if no call in this process holds it.
func (f *flights) done(key string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[key]
}

func (f *flights) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}
