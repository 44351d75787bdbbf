package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// A soak caller is an agent working through conversations: a new action
// each call, a new conversation every 20 actions or, mostly, after an
// answer that holds the conversation back. It asks again about half of the
// actions whose outcome was unknown, three seconds later (as a user who
// asks "did it go out?"), and now and then repeats an action that
// succeeded in the last ten seconds (a model that calls twice) — both well
// within the records' lifetime (a quarter of it at most), after which an
// action is new to the store. Every answer is judged against the
// destination (judge).
const (
	perConversation = 20
	askAgainAfter   = 3 * time.Second
	askAgainRate    = 0.5
	repeatRate      = 0.02
	stayAfterHeld   = 0.25 // the next action stays in a conversation held back: the fence meets it
)

type soakAction struct {
	id                 int64
	principal, session string
}

type askAgain struct {
	a   soakAction
	due time.Time
}

func (r *soakRun) caller(n int) {
	sh := &r.shards[n]
	sh.mu.Lock()
	sh.byStatus = map[string]int64{}
	sh.mu.Unlock()
	principal := "tenant-" + strconv.Itoa(n%8) + "/user-" + strconv.Itoa(n)
	conversation, inConversation := 0, 0
	session := func() string { return "conversation-" + strconv.Itoa(n) + "-" + strconv.Itoa(conversation) }
	var again []askAgain
	var lastOK *soakAction
	var lastOKAt time.Time
	againAfter, repeatWithin := min(askAgainAfter, r.cfg.TTL/4), min(10*time.Second, r.cfg.TTL/4)
	for !r.stopping.Load() {
		now := time.Now()
		var a soakAction
		kind := "new"
		switch {
		case len(again) > 0 && !now.Before(again[0].due):
			a, again, kind = again[0].a, again[1:], "again"
		case lastOK != nil && now.Sub(lastOKAt) < repeatWithin && rand.Float64() < repeatRate:
			a, kind = *lastOK, "repeat"
		default:
			if inConversation >= perConversation {
				conversation, inConversation = conversation+1, 0
			}
			inConversation++
			a = soakAction{id: r.nextID.Add(1), principal: principal, session: session()}
		}
		in, _ := json.Marshal(mailFor(a.id))
		start := time.Now()
		env := r.tool.Invoke(agenttool.WithScope(context.Background(), a.principal, a.session), string(in))
		took := time.Since(start)
		r.calls.Add(1)
		sh.mu.Lock()
		sh.latency = append(sh.latency, took)
		sh.byStatus[string(env.Status)]++
		sh.mu.Unlock()

		held := r.judge(env, a)
		switch {
		case env.Status == envelope.Success:
			lastOK, lastOKAt = &a, time.Now()
		case env.Status == envelope.UnknownOutcome && !held && kind != "again" && rand.Float64() < askAgainRate:
			again = append(again, askAgain{a: a, due: time.Now().Add(againAfter)})
		}
		if (held || env.Status == envelope.UnknownOutcome) && a.session == session() && rand.Float64() >= stayAfterHeld {
			conversation, inConversation = conversation+1, 0
		}
	}
}

// judge checks env, the answer to a call of action a, against the
// destination, and reports whether the call was held back by an earlier
// action of its conversation (the unknown fence, or a notice).
//
//   - success: the action's effect was applied;
//   - definite_failure: it was not (checked again when the load ends);
//   - unknown_outcome: a record awaits reconciliation (the action's, or
//     the earlier action's that held the call back), and says nothing the
//     destination contradicts.
//
// Applying an action twice is caught by the destination itself.
func (r *soakRun) judge(env envelope.Envelope, a soakAction) (held bool) {
	applied := r.mb.isApplied(a.id)
	held = env.Earlier != nil && env.Earlier.RequestRef != env.RequestRef
	switch env.Status {
	case envelope.Success:
		if !applied {
			r.lie("success, but the destination never applied it", env)
		}
		r.setFailed(a.id, false)
		r.mb.forget(env.RequestRef)
	case envelope.DefiniteFailure:
		if applied {
			r.lie("definite_failure, but the destination applied it", env)
		}
		r.setFailed(a.id, true)
		r.mb.forget(env.RequestRef)
	case envelope.UnknownOutcome:
		ref := env.RequestRef
		if held {
			ref = env.Earlier.RequestRef
		}
		rec, err := r.store.Get(context.Background(), ref)
		switch {
		case errors.Is(err, agenttool.ErrNotFound):
			r.lie("unknown_outcome, but no record awaits reconciliation", env)
		case err != nil:
			r.lie(fmt.Sprintf("unknown_outcome, and its record cannot be read: %v", err), env)
		case rec.State == agenttool.Failed:
			r.lie("unknown_outcome, but its record says failed", env)
		case !held && rec.State == agenttool.Succeeded && !r.mb.isApplied(a.id):
			r.lie("unknown_outcome, and its record says succeeded, but the destination never applied it", env)
		}
	default:
		r.lie("not one of the three statuses", env)
	}
	return held
}

func (r *soakRun) setFailed(id int64, failed bool) {
	r.lieMu.Lock()
	defer r.lieMu.Unlock()
	if failed {
		r.failed.set(id)
	} else {
		r.failed.clear(id)
	}
}

func (r *soakRun) lie(what string, env envelope.Envelope) {
	r.lieMu.Lock()
	defer r.lieMu.Unlock()
	r.lies++
	if len(r.lieSamples) < 5 {
		r.lieSamples = append(r.lieSamples, what+": "+env.String())
	}
}

// finalChecks runs when the load and the sweeper have stopped: an action
// whose last answer was definite_failure must still not be applied.
func (r *soakRun) finalChecks() {
	r.lieMu.Lock()
	failed := r.failed
	r.lieMu.Unlock()
	for w, bits := range failed {
		for b := range 64 {
			if bits&(1<<b) == 0 {
				continue
			}
			if id := int64(w*64 + b); r.mb.isApplied(id) {
				r.lie("definite_failure, but the destination applied it later", envelope.Envelope{
					Status: envelope.DefiniteFailure, RequestRef: "user" + strconv.FormatInt(id, 10)})
			}
		}
	}
}
