package agenttool

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// The unknown fence (invariant I9): while an action of a tool in a scope has
// an unknown outcome, no new write of that tool in that scope runs until the
// earlier action is settled. A model that reads "the email may have been
// sent" and resends it reworded makes a new key; the fence stops that
// second email before the first is known.
//
//	a new action's claim → list the scope's records awaiting reconciliation
//	  none                         → run
//	  each, through the Reconciler:
//	    not applied                → settled (approved for a retry); next
//	    applied                    → settled as success; this call does not
//	                                 run: earlier_action_applied, ask_human;
//	                                 other new writes in the scope get the
//	                                 same answer for NoticeHold (notice.go)
//	    pending, can't say, busy,
//	    or no reconciler           → this call does not run:
//	                                 earlier_action_unknown

// fencePage bounds the records read per listing.
const fencePage = 16

// fence settles the earlier actions of the call's scope that await
// reconciliation. blocked is true when the call must not run; env then
// says why.
func (c *call) fence() (env envelope.Envelope, blocked bool) {
	cfg := c.t.cfg
	if cfg.Fence == FenceOff || cfg.Class == ReadOnly {
		return envelope.Envelope{}, false
	}
	req := storekit.ListRequest{Tool: c.t.name, Principal: &c.principal, Limit: fencePage, Held: true}
	if cfg.Fence == FenceSession {
		req.Session = &c.session
	}
	for {
		req.Now = cfg.Now()
		recs, err := cfg.Store.ListUnknown(c.work, req)
		if err != nil {
			return c.storeUnavailable(fmt.Errorf("looking for earlier actions with unknown outcomes: %w", err)), true
		}
		for _, rec := range recs {
			if rec.Key == c.ref {
				continue
			}
			if env, blocked := c.settleEarlier(rec); blocked {
				return env, true
			}
		}
		if len(recs) < fencePage {
			return envelope.Envelope{}, false
		}
		req.After = recs[len(recs)-1].Key
	}
}

// settleEarlier asks the destination about one earlier action, and settles
// it by the answer.
func (c *call) settleEarlier(rec Record) (envelope.Envelope, bool) {
	cfg := c.t.cfg
	if cfg.Reconciler == nil {
		return c.fenced(rec.Key, "no reconciler can ask the destination, so it waits for a person"), true
	}
	h, err := c.t.takeOverAs(c.work, rec.Key, replacingOwner(c.ref))
	switch {
	case errors.Is(err, ErrNotUnknown):
		// Settled since it was listed: by whom does not matter, what does.
		cur, gerr := cfg.Store.Get(c.work, rec.Key)
		switch {
		case gerr == nil && cur.State == Succeeded:
			// Settled elsewhere (another process, say): the notice comes
			// late, but holds the calls after this one.
			result := c.t.storedResult(cur)
			c.t.announce(rec.Principal, rec.Session, notice{earlier: rec.Key, result: result})
			return c.earlierApplied(rec.Key, result), true
		case gerr == nil && cur.State == Unknown && cur.RetryApproved:
			// Found not applied and approved for one more attempt since it
			// was listed: its own resend may run any moment, and this call
			// holds nothing of it. Neither runs beside the other.
			if env, held := c.noticed(); held {
				// A call that went on in its place was just done.
				return env, true
			}
			env := c.fenced(rec.Key, "")
			env.Next = envelope.AskHuman
			env.Error.Message = fmt.Sprintf("an earlier %s of this %s (%s) was just found not applied, and one more attempt of it is allowed; "+
				"this call was not run, so that the two do not both run", c.t.name, c.t.cfg.Fence, rec.Key)
			env.Earlier.State = envelope.ActionFailed
			env.Note = fmt.Sprintf("An earlier %s in this conversation (reference %s) was found not done, and one more attempt of it is allowed; nothing new was done. "+
				"Tell the user, and ask before calling %s again.", c.t.name, rec.Key, c.t.name)
			return env, true
		case gerr == nil && cur.State == Failed, errors.Is(gerr, ErrNotFound):
			return envelope.Envelope{}, false
		}
		return c.fenced(rec.Key, "it is being settled"), true
	case errors.Is(err, ErrBusy):
		return c.fenced(rec.Key, "it is being verified right now"), true
	case err != nil:
		return c.storeUnavailable(fmt.Errorf("taking over the earlier action %s: %w", rec.Key, err)), true
	}
	ans := h.ask(c.work, "fence")
	switch ans.Verdict {
	case reconcile.Applied:
		// Announced before it is written (holding.applied).
		_, err := h.applied(c.work, ans.Result, &Resolution{Verdict: "applied", By: "fence"})
		if err != nil {
			return c.storeUnavailable(fmt.Errorf("settling the earlier action %s: %w", rec.Key, err)), true
		}
		return c.earlierApplied(rec.Key, ans.Result), true
	case reconcile.NotApplied:
		// This call goes on in place of the earlier action. The earlier
		// one stays held, so that its own resend waits, and is settled as
		// not applied when this call ends (settleDeferred), after this
		// call's success is announced: the resend is then told what was
		// done instead.
		c.deferred = append(c.deferred, h)
		// While it runs, this call fences the scope: if the hold on the
		// earlier action is lost, or this call ends without an outcome (a
		// panic), the earlier action's resend still finds it at work.
		if err := c.fenceOwn(); err != nil {
			return c.storeUnavailable(fmt.Errorf("marking this call for the unknown fence: %w", err)), true
		}
		return envelope.Envelope{}, false
	}
	if err := h.stillUnknown(c.work); err != nil {
		return c.storeUnavailable(fmt.Errorf("settling the earlier action %s: %w", rec.Key, err)), true
	}
	return c.fenced(rec.Key, "the destination's answer: "+describe(ans)), true
}

// settleDeferred records the earlier actions this call's fence found not
// applied as such (approved for one more attempt), once the call is done.
// A call that did not end normally (its tool panicked) may have acted in
// their place: they are given back unknown, to be asked again, never
// approved.
func (c *call) settleDeferred(normal bool) {
	for _, h := range c.deferred {
		if !normal {
			if err := h.stillUnknown(c.ctx); err != nil {
				c.t.cfg.logger.Warn("retrysafe: an earlier action held by a call that panicked could not be given back", "ref", h.rec.Key, "err", err)
			}
			continue
		}
		if err := h.notApplied(c.ctx, &Resolution{Verdict: "not applied", By: "fence"}); err != nil {
			// The record stays held until its lease lapses, then unknown:
			// asked again, never free.
			c.t.cfg.logger.Warn("retrysafe: an earlier action found not applied could not be recorded so", "ref", h.rec.Key, "err", err)
		}
	}
	c.deferred = nil
}

// replacingOwner is the lease owner under which a call's fence holds an
// earlier action found not applied while the call, ref, goes on in its
// place (see replacedBy).
func replacingOwner(ref string) string { return fenceOwnerPrefix + ref + " " + newOwner() }

const fenceOwnerPrefix = "in-place-of:"

// replacedBy returns the call that holds rec while it goes on in rec's
// place, if one does.
func replacedBy(rec Record) (string, bool) {
	rest, ok := strings.CutPrefix(rec.Owner, fenceOwnerPrefix)
	if !ok {
		return "", false
	}
	ref, _, ok := strings.Cut(rest, " ")
	return ref, ok
}

// fenced is the envelope of a call held back by an earlier action whose
// outcome is still unknown.
func (c *call) fenced(earlier, why string) envelope.Envelope {
	next := envelope.DoNotRetry
	if c.t.cfg.Class == AtMostOnce {
		next = envelope.AskHuman
	}
	return envelope.Envelope{
		Version: envelope.Version, Status: envelope.UnknownOutcome, Tool: c.t.name, RequestRef: c.ref, Next: next,
		Error: &envelope.Error{Code: envelope.CodeEarlierUnknown,
			Message: fmt.Sprintf("an earlier %s of this %s (%s) has an unknown outcome (%s); this call was not run", c.t.name, c.t.cfg.Fence, earlier, why)},
		Earlier: &envelope.Earlier{RequestRef: earlier, State: envelope.ActionUnknown},
		Note: fmt.Sprintf("An earlier %s in this conversation may already have happened and is still being verified (reference %s); nothing new was done. "+
			"Tell the user it is pending, and do not call %s again until it is settled.", c.t.name, earlier, c.t.name),
	}
}

// earlierApplied is the envelope of a call held back by an earlier action
// that, once asked, turned out done: the user hears of it before anything
// else is sent.
func (c *call) earlierApplied(earlier string, result json.RawMessage) envelope.Envelope {
	if len(result) > 0 && !json.Valid(result) {
		result = nil
	}
	return envelope.Envelope{
		Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: c.t.name, RequestRef: c.ref, Next: envelope.AskHuman,
		Error: &envelope.Error{Code: envelope.CodeEarlierApplied,
			Message: fmt.Sprintf("an earlier %s of this %s (%s), whose outcome was unknown, was confirmed done; this call was not run", c.t.name, c.t.cfg.Fence, earlier)},
		Earlier: &envelope.Earlier{RequestRef: earlier, State: envelope.ActionSucceeded, Result: result},
		Note: fmt.Sprintf("An earlier %s in this conversation was confirmed done (reference %s); nothing new was done. "+
			"Tell the user, and ask before doing it again.", c.t.name, earlier),
	}
}

// earlierDone is the envelope of a call held back because another action
// of the tool in the scope was just done in place of one whose outcome was
// unknown and which was found not applied: the user hears of it before
// anything else is sent.
func (c *call) earlierDone(earlier string, result json.RawMessage) envelope.Envelope {
	env := c.earlierApplied(earlier, result)
	env.Error.Message = fmt.Sprintf("another %s of this %s (%s) was just done, in place of an earlier one whose outcome was unknown; this call was not run",
		c.t.name, c.t.cfg.Fence, earlier)
	env.Note = fmt.Sprintf("Another %s in this conversation was just done (reference %s); nothing new was done. "+
		"Tell the user, and ask before doing it again.", c.t.name, earlier)
	return env
}

// storedResult returns the result of a succeeded record, or nil if its
// outcome cannot be read.
func (t *Tool) storedResult(rec Record) json.RawMessage {
	raw, err := t.cfg.codec.Decode(rec.Key, rec.Outcome)
	if err != nil {
		return nil
	}
	env, err := envelope.Parse(raw)
	if err != nil {
		return nil
	}
	return env.Result
}
