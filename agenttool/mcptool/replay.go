package mcptool

import (
	"context"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// sightings remembers the actions a retrysafe server answered a success
// for to one guarded tool: for each server reference, when the first such
// success came back and to which call (its request reference).
//
// A replayed success says that the server did the action for an earlier
// request, which may be a copy of this very request: a proxy delivered it
// twice and the answer of the copy that ran was lost. The client's
// envelope says replayed (agenttool.DestinationReplayedAnother) only if the
// action was seen done, by another call, before this call's request was
// sent: then no copy of it can have done it. Otherwise the success is an
// ordinary one, which is what the engine answers whenever an attempt of
// the call's own may have landed.
//
// The memory is bounded and of this process: what it has forgotten, or
// never saw, is not attributed. Safe for concurrent use.
type sightings struct {
	mu    sync.Mutex
	first map[string]sighting // by the server's reference
	order []string            // the server's references, oldest first
}

type sighting struct {
	at time.Time
	by string // the client's request reference
}

// sightingsLimit bounds sightings.
const sightingsLimit = 1024

// success records a success envelope of the server, answered to the call
// whose attempt runs on ctx and was sent at sent, and tells that call if
// the server replayed another call's action.
func (m *sightings) success(ctx context.Context, env envelope.Envelope, sent time.Time) {
	ours := agenttool.RequestRef(ctx)
	if env.RequestRef == "" || ours == "" {
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.first[env.RequestRef]; ok {
		if env.Replayed && s.by != ours && s.at.Before(sent) {
			agenttool.DestinationReplayedAnother(ctx)
		}
		return
	}
	if m.first == nil {
		m.first = map[string]sighting{}
	}
	if len(m.order) == sightingsLimit {
		delete(m.first, m.order[0])
		m.order = m.order[1:]
	}
	m.order = append(m.order, env.RequestRef)
	m.first[env.RequestRef] = sighting{at: now, by: ours}
}
