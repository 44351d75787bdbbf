package main

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/httpsend"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
	"github.com/retrysafe/retrysafe/reconcile"
)

// clock is the replicas' clock, moved by the test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// pausedSend is an HTTP transport whose first request stops after the
// tool's last look at its context and before its bytes leave, as a process
// paused by a GC, a VM migration or SIGSTOP does, until resume is closed;
// then it goes out whatever its context says by now.
type pausedSend struct {
	paused chan struct{} // closed when the request is paused
	resume chan struct{}
	once   sync.Once
	ref    string // the paused request's Idempotency-Key, once paused
}

func newPausedSend() *pausedSend {
	return &pausedSend{paused: make(chan struct{}), resume: make(chan struct{})}
}

func (p *pausedSend) RoundTrip(req *http.Request) (*http.Response, error) {
	first := false
	p.once.Do(func() { first = true })
	if first {
		p.ref = req.Header.Get("Idempotency-Key")
		close(p.paused)
		<-p.resume
		req = req.WithContext(context.WithoutCancel(req.Context()))
	}
	return sender.RoundTrip(req)
}

// sender sends the replicas' requests, each at most once per attempt.
var sender = &httpsend.Transport{}

// replicas are two replicas of the booking agent on one store and one
// clock, in front of one booking service: the first one's request pauses.
type replicas struct {
	svc    *demo.BookingService
	store  *boltstore.Store
	clock  *clock
	send   *pausedSend
	paused *agenttool.Tool // the replica whose request pauses
	other  *agenttool.Tool
}

func newReplicas(t *testing.T) *replicas {
	t.Helper()
	svc, err := demo.StartBookingService("none", 0, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "agents.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	r := &replicas{svc: svc, store: store, clock: &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}, send: newPausedSend()}
	opts := agenttool.Options{Store: store, Now: r.clock.Now, Lease: time.Minute, ClockSkew: time.Second}
	if r.paused, err = demo.NewBookTool(svc.URL, &http.Client{Transport: r.send}, t.Logf, opts); err != nil {
		t.Fatal(err)
	}
	if r.other, err = demo.NewBookTool(svc.URL, &http.Client{Transport: sender}, t.Logf, opts); err != nil {
		t.Fatal(err)
	}
	return r
}

const anaToLisbon = `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`

var conversation = agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-12")

// bookPaused starts the paused replica's booking and returns, once its
// request is paused, where its envelope will come.
func (r *replicas) bookPaused() <-chan envelope.Envelope {
	out := make(chan envelope.Envelope, 1)
	go func() { out <- r.paused.Invoke(conversation, anaToLisbon) }()
	<-r.send.paused
	return out
}

// The write of a paused holder, refused by its fencing token: the first
// replica's booking pauses past its lease; the model's resend reaches the
// second replica, which takes the action over and books; when the first
// resumes, its request reaches the service with the older token and is
// refused. One booking, and every envelope says what happened.
func TestPausedHoldersLateWriteIsRefused(t *testing.T) {
	r := newReplicas(t)
	first := r.bookPaused()
	r.clock.advance(10 * time.Minute) // the first holder's lease lapsed long ago

	resent := r.other.Invoke(conversation, anaToLisbon)
	if resent.Status != envelope.Success || resent.Replayed || r.svc.Count() != 1 {
		t.Fatalf("the resend on the other replica: %s; %d bookings; want it to take the action over and book once", resent, r.svc.Count())
	}
	close(r.send.resume)
	// Its own request booked nothing, but the action was booked: it
	// answers with the booking, replayed — never "failed".
	stale := <-first
	if stale.Status != envelope.Success || !stale.Replayed || string(stale.Result) != string(resent.Result) {
		t.Errorf("the paused holder's envelope: %s; want the other replica's booking, replayed", stale)
	}
	if r.svc.Count() != 1 || r.svc.StaleCount() != 1 {
		t.Errorf("%d bookings, %d stale requests refused; want 1 and 1", r.svc.Count(), r.svc.StaleCount())
	}
	again := r.paused.Invoke(conversation, anaToLisbon)
	if again.Status != envelope.Success || !again.Replayed || string(again.Result) != string(resent.Result) {
		t.Errorf("asked again on the replica that paused: %s; want the booking replayed", again)
	}
}

// A check fences too: the first replica's booking pauses just past its
// lease; an operator asks the service about it, and the check, carrying
// the operator's newer token, makes the service refuse every older
// request — so its "not found" is final at once, not only once the paused
// request could no longer arrive. The paused request is refused when it
// resumes; the model's resend books once.
func TestCheckFencesOutThePausedHolder(t *testing.T) {
	r := newReplicas(t)
	first := r.bookPaused()
	r.clock.advance(time.Minute + time.Millisecond) // lapsed; its request could still be in flight for AttemptTimeout + ClockSkew

	op, err := agenttool.NewOperator(r.store, r.other)
	if err != nil {
		t.Fatal(err)
	}
	v, err := op.Reconcile(context.Background(), r.send.ref, "maria")
	if err != nil || v != reconcile.NotApplied {
		t.Fatalf("the operator's check: %v, %v; want not applied, trusted at once", v, err)
	}
	close(r.send.resume)
	// The stale request is refused; the paused call, which lost its hold,
	// claims the action again — approved for one more attempt — and books
	// it under a new token: once.
	stale := <-first
	if r.svc.StaleCount() != 1 || r.svc.Count() != 1 || stale.Status != envelope.Success {
		t.Fatalf("the paused holder: %s; %d bookings, %d stale requests refused; want its stale request refused and the action booked once",
			stale, r.svc.Count(), r.svc.StaleCount())
	}
	resent := r.other.Invoke(conversation, anaToLisbon)
	if resent.Status != envelope.Success || !resent.Replayed || r.svc.Count() != 1 {
		t.Errorf("the model's resend: %s; %d bookings; want the booking replayed", resent, r.svc.Count())
	}
}
