package agenttool

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
)

// notices are the tool's actions whose unknown outcome was just found
// applied, by scope, each for Options.NoticeHold: until then, another new
// write of the tool in the scope gets earlier_action_applied instead of
// running. The model reads an answer only after its turn's tool calls have
// run, so a reworded copy of the action sent in the same turn, or a repeat
// made without reading the answer, would otherwise send what the user was
// just to be asked about.
type notices struct {
	n  atomic.Int32 // len(m): calls skip the lock while there are none
	mu sync.Mutex
	m  map[noticeScope]notice
}

// noticeScope is the fence's scope of a call: its principal, and its
// session unless the fence covers the principal.
type noticeScope struct{ principal, session Digest }

type notice struct {
	earlier  string          // the action found applied, or just done in place of one
	result   json.RawMessage // its result, if known
	replaced bool            // earlier was just done in place of an action found not applied
	retrying bool            // earlier is about to be retried, as an approver allowed
	until    time.Time
}

// put records that earlier was found applied in scope at now, held until
// until, and drops the notices whose hold has ended.
func (ns *notices) put(scope noticeScope, n notice, now time.Time) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.m == nil {
		ns.m = make(map[noticeScope]notice)
	}
	for k, v := range ns.m {
		if !now.Before(v.until) {
			delete(ns.m, k)
		}
	}
	ns.m[scope] = n
	ns.n.Store(int32(len(ns.m)))
}

// get returns the notice held for scope at now.
func (ns *notices) get(scope noticeScope, now time.Time) (notice, bool) {
	if ns.n.Load() == 0 {
		return notice{}, false
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n, ok := ns.m[scope]
	if !ok || !now.Before(n.until) {
		return notice{}, false
	}
	return n, true
}

// noticeScope is the scope the tool's fence covers for a record or call
// of principal and session (digests, as records keep them).
func (t *Tool) noticeScope(principal, session Digest) noticeScope {
	s := noticeScope{principal: principal}
	if t.cfg.Fence == FenceSession {
		s.session = session
	}
	return s
}

// noticed returns the earlier_action_applied answer the call gets if an
// action of the tool in its scope was found applied after an unknown
// outcome within NoticeHold. The hold is not restarted: a scope whose
// calls keep coming is held back for NoticeHold, not for as long as they
// come.
func (c *call) noticed() (env envelope.Envelope, held bool) {
	cfg := c.t.cfg
	if c.t.notices.n.Load() == 0 || cfg.Fence == FenceOff || cfg.Class == ReadOnly {
		return env, false
	}
	n, ok := c.t.notices.get(c.t.noticeScope(c.principal, c.session), cfg.Now())
	if !ok || n.earlier == c.ref {
		return env, false
	}
	switch {
	case n.retrying:
		return c.fenced(n.earlier, "an approver allowed one more attempt, which is about to run"), true
	case n.replaced:
		return c.earlierDone(n.earlier, n.result), true
	}
	return c.earlierApplied(n.earlier, n.result), true
}

// announce records n — an action of the tool whose outcome was unknown,
// found applied; or, with n.replaced, a call just done in place of such an
// action found not applied; or, with n.retrying, such an action about to be
// retried as an approver allowed — for the scope of principal and session,
// held for NoticeHold. It runs before the outcome or approval is written: a
// call that no longer finds the action unknown finds the notice.
func (t *Tool) announce(principal, session Digest, n notice) {
	cfg := t.cfg
	if cfg.NoticeHold < 0 || cfg.Fence == FenceOff || cfg.Class == ReadOnly {
		return
	}
	if len(n.result) > 0 && !json.Valid(n.result) {
		n.result = nil
	}
	now := cfg.Now()
	n.until = now.Add(cfg.NoticeHold)
	t.notices.put(t.noticeScope(principal, session), n, now)
}
