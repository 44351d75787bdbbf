package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// mailbox is the soak benchmark's destination: a mail service that applies
// each action's effect, counts effects per action, and answers checks
// truthfully — pending while a request for the reference is in flight, and
// now and then even when it knows, as a busy service's status endpoint
// does. Its faults are drawn per attempt:
//
//   - failRate: refused (a definite failure), nothing applied;
//   - lostRate: applied, and the reply is lost (an unknown outcome);
//   - slowRate: applied after slowMin to slowMax, whatever the client does
//     meanwhile (an attempt that times out is an unknown outcome);
//   - otherwise applied at once.
//
// It remembers one bit per action (applied or not), so that a second
// effect of any action is seen, and the reference of an action for as long
// as it may be asked about: an action's reference is forgotten when its
// caller has a final answer or a check settles it. A mailbox is safe for
// concurrent use.
type mailbox struct {
	failRate, lostRate, slowRate float64
	slowMin, slowMax             time.Duration
	pendingRate                  float64 // a check answers pending though it knows

	mu         sync.Mutex
	applied    bitset           // by action
	inflight   map[int64]int    // requests being applied, by action
	refs       map[string]int64 // reference → action, while it may be asked about
	duplicates []int64          // actions applied more than once
	effects    int64
	// unrecognised counts checks of a reference the mailbox does not know
	// (answered can't say): forgotten too early, or never sent.
	unrecognised int64
}

func newMailbox() *mailbox {
	return &mailbox{
		failRate: 0.05, lostRate: 0.05, slowRate: 0.005, slowMin: 100 * time.Millisecond, slowMax: 400 * time.Millisecond,
		pendingRate: 0.25,
		inflight:    map[int64]int{}, refs: map[string]int64{},
	}
}

// mail is the soak tool's input. To names the action: user<id>@example.com.
type mail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

type delivered struct {
	MessageID string `json:"message_id"`
}

func mailFor(id int64) mail {
	return mail{To: "user" + strconv.FormatInt(id, 10) + "@example.com", Subject: "Your booking is confirmed",
		Body: "Hello, your seat 14C on flight TP1234 from Lisbon to Porto on 12 December at 09:40 is confirmed."}
}

func actionOf(to string) (int64, error) {
	s, user := strings.CutPrefix(to, "user")
	s, domain := strings.CutSuffix(s, "@example.com")
	if !user || !domain {
		return 0, fmt.Errorf("not a soak recipient: %q", to)
	}
	return strconv.ParseInt(s, 10, 64)
}

// send is the guarded tool's function: one attempt.
func (m *mailbox) send(ctx context.Context, in mail) (delivered, error) {
	id, err := actionOf(in.To)
	if err != nil {
		return delivered{}, envelope.MarkDefinite(err, "bad_recipient")
	}
	ref := agenttool.RequestRef(ctx)
	m.mu.Lock()
	m.refs[ref] = id
	m.inflight[id]++
	m.mu.Unlock()
	ok := delivered{MessageID: "<" + strconv.FormatInt(id, 10) + "@mail.example>"}
	switch r := rand.Float64(); {
	case r < m.failRate:
		m.land(id, false)
		return delivered{}, envelope.MarkDefinite(errors.New("the mailbox is full"), "mailbox_full")
	case r < m.failRate+m.lostRate:
		m.land(id, true)
		return delivered{}, envelope.MarkUnknown(errors.New("the connection dropped before the reply"))
	case r < m.failRate+m.lostRate+m.slowRate:
		done := make(chan struct{})
		d := m.slowMin + rand.N(m.slowMax-m.slowMin)
		go func() { // the server finishes what it started
			time.Sleep(d)
			m.land(id, true)
			close(done)
		}()
		select {
		case <-done:
			return ok, nil
		case <-ctx.Done():
			return delivered{}, context.Cause(ctx)
		}
	}
	m.land(id, true)
	return ok, nil
}

// land ends a request for action id, applying its effect if apply.
func (m *mailbox) land(id int64, apply bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inflight[id]--; m.inflight[id] <= 0 {
		delete(m.inflight, id)
	}
	if !apply {
		return
	}
	m.effects++
	if m.applied.get(id) {
		m.duplicates = append(m.duplicates, id)
		return
	}
	m.applied.set(id)
}

// Check implements reconcile.Reconciler.
func (m *mailbox) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.refs[req.Ref]
	switch {
	case !ok:
		m.unrecognised++
		return reconcile.CantSayBecause(errors.New("no request with this reference is known here"))
	case m.inflight[id] > 0, rand.Float64() < m.pendingRate:
		return reconcile.StillPending()
	case m.applied.get(id):
		return reconcile.AppliedWith([]byte(`{"message_id":"<` + strconv.FormatInt(id, 10) + `@mail.example>"}`))
	}
	return reconcile.NotAppliedYet()
}

// settled forgets ref once a check has settled it (the hook of every
// check: by a call, the fence or the sweeper).
func (m *mailbox) settled(_ context.Context, e agenttool.ReconcileEvent) {
	if e.Verdict == reconcile.Applied || e.Verdict == reconcile.NotApplied {
		m.forget(e.RequestRef)
	}
}

// forget drops a reference that will not be asked about again.
func (m *mailbox) forget(ref string) {
	m.mu.Lock()
	delete(m.refs, ref)
	m.mu.Unlock()
}

func (m *mailbox) isApplied(id int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applied.get(id)
}

// quiet waits until no request is in flight, at most d.
func (m *mailbox) quiet(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		m.mu.Lock()
		n := len(m.inflight)
		m.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

// bitset is a growable set of non-negative integers.
type bitset []uint64

func (b *bitset) set(i int64) {
	w := int(i / 64)
	if w >= len(*b) {
		*b = append(*b, make([]uint64, w+1-len(*b)+len(*b)/4)...)
	}
	(*b)[w] |= 1 << (i % 64)
}

func (b bitset) get(i int64) bool {
	w := int(i / 64)
	return w < len(b) && b[w]&(1<<(i%64)) != 0
}

func (b *bitset) clear(i int64) {
	if w := int(i / 64); w < len(*b) {
		(*b)[w] &^= 1 << (i % 64)
	}
}
