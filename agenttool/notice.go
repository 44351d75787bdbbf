package agenttool

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
)

// notices are the earlier_action_applied answers the unknown fence gave,
// by scope, for Options.NoticeHold: until then, another new write of the
// tool in the scope gets the same answer instead of running. The model
// reads the answer only after its turn's tool calls have run, so a second
// call of the same turn, or a repeat made without reading it, would
// otherwise send what the user was just to be asked about.
type notices struct {
	n  atomic.Int32 // len(m): calls skip the lock while there are none
	mu sync.Mutex
	m  map[noticeScope]notice
}

// noticeScope is the fence's scope of a call: its principal, and its
// session unless the fence covers the principal.
type noticeScope struct{ principal, session Digest }

type notice struct {
	earlier string          // the action found applied
	result  json.RawMessage // its result, if known
	until   time.Time
}

// put records that the fence answered earlier_action_applied for earlier
// in scope at now, and drops the notices whose hold has ended.
func (ns *notices) put(scope noticeScope, earlier string, result json.RawMessage, now, until time.Time) {
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
	ns.m[scope] = notice{earlier: earlier, result: result, until: until}
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

// noticeScope is the scope the call's fence covers.
func (c *call) noticeScope() noticeScope {
	s := noticeScope{principal: c.principal}
	if c.t.cfg.Fence == FenceSession {
		s.session = c.session
	}
	return s
}

// noticed returns the earlier_action_applied answer the call gets if the
// fence gave one in its scope within NoticeHold. The hold is not
// restarted: a scope whose calls keep coming is held back for NoticeHold,
// not for as long as they come.
func (c *call) noticed() (env envelope.Envelope, held bool) {
	cfg := c.t.cfg
	if c.t.notices.n.Load() == 0 || cfg.Fence == FenceOff || cfg.Class == ReadOnly {
		return env, false
	}
	now := cfg.Now()
	n, ok := c.t.notices.get(c.noticeScope(), now)
	if !ok || n.earlier == c.ref {
		return env, false
	}
	return c.earlierApplied(n.earlier, n.result), true
}

// announce records the fence's earlier_action_applied answer for the
// call's scope.
func (c *call) announce(earlier string, result json.RawMessage) {
	cfg := c.t.cfg
	if cfg.NoticeHold < 0 {
		return
	}
	now := cfg.Now()
	c.t.notices.put(c.noticeScope(), earlier, result, now, now.Add(cfg.NoticeHold))
}
