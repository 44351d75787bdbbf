package console

import (
	"context"
	"sync"

	"github.com/retrysafe/retrysafe/agenttool"
)

// Approvals is an [agenttool.Approver] backed by the console. Give the
// same Approvals to the application's at-most-once tools
// (agenttool.Options.Approver) and to the console (Options.Approvals):
// when a call meets an action whose outcome is unknown, the tool asks it,
// the model is told to ask a human (next ask_human), and the console's
// list shows the action at the top with the call's label, its scope as
// the application shows it, and how often the agent asked.
//
// Approvals decides nothing itself: it answers [agenttool.Undecided]. A
// person's decision is made in the console, which settles the action
// through the Operator, in the store: approve one retry is
// Operator.ResolveNotApplied bound to the attempts the person saw, and the
// tool's next call for the action runs it exactly once; compensate runs
// the tool's Compensate at once. Decisions are thereby durable, seen by
// every replica that shares the store, and bound to the outcome decided on
// by the store's own check (agenttool.ErrStale), which an approval held in
// memory would not be.
//
// What Approvals keeps is in memory, in this process only: the latest
// request per action, for the last 1,000 actions asked about. After a
// restart, or for an action asked about in another replica, the console
// still lists the action (from the store) with its label, without the
// scope. An Approvals is safe for concurrent use; its zero value is ready.
type Approvals struct {
	mu    sync.Mutex
	asked map[string]*asked // by request reference
	seq   uint64
}

// asked is the latest request about one action.
type asked struct {
	req   agenttool.ApprovalRequest
	times int    // how often the agent asked about this outcome (these attempts)
	seq   uint64 // when, in the order of requests
}

// maxAsked bounds the actions an Approvals remembers.
const maxAsked = 1000

// Approve records req and answers Undecided.
func (a *Approvals) Approve(_ context.Context, req agenttool.ApprovalRequest) (agenttool.Approval, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.asked == nil {
		a.asked = make(map[string]*asked)
	}
	a.seq++
	x, ok := a.asked[req.RequestRef]
	if !ok {
		if len(a.asked) >= maxAsked {
			a.evict()
		}
		x = &asked{}
		a.asked[req.RequestRef] = x
	}
	if !ok || x.req.Attempts != req.Attempts {
		x.times = 0
	}
	x.req, x.seq = req, a.seq
	x.times++
	return agenttool.Approval{Decision: agenttool.Undecided}, nil
}

// evict forgets the action asked about least recently.
func (a *Approvals) evict() {
	var oldest string
	var at uint64
	for ref, x := range a.asked {
		if oldest == "" || x.seq < at {
			oldest, at = ref, x.seq
		}
	}
	delete(a.asked, oldest)
}

// lookup returns the latest request about ref, if the action of rec was
// asked about: the same reference, principal-checked by the caller.
func (a *Approvals) lookup(ref string) (asked, bool) {
	if a == nil {
		return asked{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	x, ok := a.asked[ref]
	if !ok {
		return asked{}, false
	}
	return *x, true
}

// forget drops what is kept about ref, once the action is settled.
func (a *Approvals) forget(ref string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.asked, ref)
}
