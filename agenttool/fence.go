package agenttool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
// The store decides it in the claim (storekit.DecideClaim): at most one
// record of a tool and fence scope holds the scope's slot — running,
// unknown, approved for one more attempt, or just found done (its notice).
// A claim the slot refuses names the record that holds it; when that
// action's outcome is unknown, the call's fence phase settles it first:
//
//	the slot's action is unknown, or its holder's lease lapsed
//	  no reconciler, or the action
//	  sent otherwise than this
//	  definition sends it
//	  (definition.go)            → this call does not run: earlier_action_unknown
//	  taken over, and asked:
//	    applied                  → settled as success, with a notice; then this
//	                               call is kept held back under its key (a
//	                               claim carrying FoundApplied, which tells
//	                               the notice): it does not run
//	                               (earlier_action_applied, the same if asked
//	                               for again), nor do the scope's other new
//	                               writes of its turn (NoticeHold)
//	    not applied              → this call claims its key in that action's
//	                               place: the store closes that action as
//	                               replaced, in the claim's transaction, and its
//	                               resend is told what was done instead
//	    pending, can't say       → given back; this call does not run:
//	                               earlier_action_unknown
//	  settled or taken since the claim saw it → claim again

// whySentOtherwise is why the fence does not check an earlier action sent
// otherwise than the tool sends it (definition.go).
const whySentOtherwise = "it was sent under another definition of the tool, which this one does not check, so it waits for a person"

// fence settles the action that holds the scope's slot (c.other), whose
// outcome is unknown.
func (c *call) fence() outcome {
	cfg := c.t.cfg
	o := c.other
	switch {
	case cfg.Reconciler == nil && c.resendSettles(&o):
		return c.answer(earlierUnknown, answer{reason: reasonEarlierUnknown, other: &o,
			why: "no reconciler can ask the destination, and its own request, sent again, settles it"})
	case cfg.Reconciler == nil:
		return c.answer(earlierUnknown, answer{reason: reasonEarlierUnknown, other: &o,
			why: "no reconciler can ask the destination, so it waits for a person"})
	case cfg.sentOtherwise(&o):
		return c.answer(earlierUnknown, answer{reason: reasonEarlierUnknown, other: &o, why: whySentOtherwise})
	}
	h, err := c.t.takeOver(c.ctx, o.Key)
	switch {
	case errors.Is(err, ErrNotUnknown), errors.Is(err, ErrBusy), errors.Is(err, ErrNotFound):
		return earlierMoved // settled, or held by another check, since the claim saw it
	case err != nil:
		return c.storeFailed(fmt.Errorf("taking over the earlier action %s: %w", o.Key, err))
	}
	if cfg.sentOtherwise(&h.rec) {
		// Retried under another definition since the claim saw it: its
		// latest attempt is checked only as it was sent.
		o = h.rec
		if err := h.stillUnknown(c.ctx); err != nil {
			return c.storeFailed(fmt.Errorf("settling the earlier action %s: %w", o.Key, err))
		}
		return c.answer(earlierUnknown, answer{reason: reasonEarlierUnknown, other: &o, why: whySentOtherwise})
	}
	ans := h.ask(c.ctx, "fence")
	switch ans.Verdict {
	case reconcile.Applied:
		// Settled first, with its notice untold; then the store keeps
		// this call held back under its key — asked for again, word for
		// word, it is answered the same — and, in the same transaction,
		// tells the notice. A call is kept held back only by an action
		// the store has settled applied (settled, it stays so). A store
		// that cannot keep it: the call answers store_unavailable, and
		// the notice, untold, holds its retry back until a call is told
		// of it (at most NoticeBackstop).
		if _, err := h.applied(c.ctx, ans.Result, &Resolution{Verdict: "applied", By: "fence"}); err != nil {
			return c.storeFailed(fmt.Errorf("settling the earlier action %s: %w", o.Key, err))
		}
		kept, err := c.keepHeldBack(o)
		if err != nil {
			return c.storeFailed(fmt.Errorf("keeping this call held back by the earlier action %s, found done: %w", o.Key, err))
		}
		return c.answer(earlierApplied, answer{reason: reasonEarlierApplied, other: &o, result: ans.Result, kept: kept})
	case reconcile.NotApplied:
		// An action an older version left open in the scope holds no slot
		// (a store upgraded to slots gives each scope's newest one the
		// slot): this call does not go on while one is unknown.
		if l, err := c.outside(o); err != nil || l != nil {
			if nerr := h.notApplied(c.ctx, &Resolution{Verdict: "not applied", By: "fence"}); nerr != nil {
				return c.storeFailed(fmt.Errorf("settling the earlier action %s: %w", o.Key, nerr))
			}
			if err != nil {
				return c.storeFailed(err)
			}
			return c.answer(earlierUnknown, answer{reason: reasonEarlierUnknown, other: l, why: "an older version left it unknown"})
		}
		// This call goes on in its place: the claim closes it, or gives it
		// back as found (letGo).
		rep, err := c.replacing(h.rec, h.token, &Resolution{Verdict: "not applied", By: "fence", At: cfg.Now()})
		if err != nil {
			h.end()
			return c.storeFailed(err)
		}
		c.held, c.replace = h, rep
		return earlierNotApplied
	}
	if err := h.stillUnknown(c.ctx); err != nil {
		return c.storeFailed(fmt.Errorf("settling the earlier action %s: %w", o.Key, err))
	}
	return c.answer(earlierUnknown, answer{reason: reasonEarlierUnknown, other: &o, why: "the destination's answer: " + describe(ans)})
}

// keepHeldBack has the store keep the call held back by o, an action its
// fence found done and settled applied: a claim of the call's key
// carrying ClaimRequest.FoundApplied, which the store never grants, and
// writes held back (Record.HeldBack) whatever holds the slot, telling o's
// notice where it holds the call back. kept reports whether the store
// keeps it: not with no notices (NoticeHold negative), nor where a
// missing record proves nothing (a failover window), nor when the key has
// a record already (another call of it).
func (c *call) keepHeldBack(o Record) (kept bool, err error) {
	cfg := c.t.cfg
	if !cfg.notices() {
		return false, nil
	}
	req := c.req
	// TakeOver stays the call's: a store that may have lost the key's
	// claim (a failover window) decides it as one it may have lost, and
	// keeps nothing (storekit.DecideLost).
	req.Now, req.FoundApplied = cfg.Now(), o.Key
	ctx, cancel := context.WithTimeout(c.ctx, cfg.StoreTimeout)
	defer cancel()
	res, err := cfg.Store.Claim(ctx, req)
	switch {
	case err != nil:
		return false, err
	case res.Claimed:
		// A store that ignores FoundApplied: give the key back, unused.
		err := cfg.Store.Release(ctx, c.ref, res.Record.Token)
		return false, errors.Join(fmt.Errorf("the store granted a claim it must hold back (ClaimRequest.FoundApplied): %w", ErrCorrupt), err)
	}
	return res.Record.Key == c.ref && res.Record.HeldBack(), nil
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

// outside returns an action of the call's scope, other than o, that
// awaits reconciliation without holding the call's slot: one an older
// version of retrysafe left open (its records had no fence scope), or one
// claimed under another fence setting of the tool (its slot is its
// session's where the call's is its principal's, or the reverse; none
// under FenceOff). Read from the stores' index of open records.
func (c *call) outside(o Record) (*Record, error) {
	req := storekit.ListRequest{Tool: c.t.name, Principal: &c.principal, Now: c.t.cfg.Now(), Limit: fencePage}
	if c.t.cfg.Fence == FenceSession {
		req.Session = &c.session
	}
	slot := c.req.Slot()
	for {
		recs, err := c.t.cfg.Store.ListUnknown(c.ctx, req)
		if err != nil && len(CorruptKeys(err)) == 0 {
			return nil, fmt.Errorf("looking for other unknown actions of the scope: %w", err)
		}
		for i := range recs {
			if r := recs[i]; r.Key != o.Key && r.Key != c.ref && !(r.HoldsSlot() && r.Slot() == slot) {
				return &r, nil
			}
		}
		if len(recs) < fencePage {
			return nil, nil
		}
		req.After = recs[len(recs)-1].Key
	}
}

// beside reports whether a write that a principal-wide fence granted its
// slot — a new action, one in place of an approved or replaced one, or an
// approved retry; a takeover goes on with its own action and does not
// look — must give its key back: an action of the principal's scope
// that does not hold that slot is unknown (outside), and holds the call
// back as the slot's holder would (I9). The call's answer is set. The
// store held the claim back already for the principal's actions that
// hold no slot (claimed under FenceOff, or settled aside); this read
// finds those its sessions' fences hold, left by the tool's earlier
// setting. A session's fence does not look (a read on every call); its
// actions outside the slot are the caveat of changing a tool's fence.
func (c *call) beside(rec Record) bool {
	if c.t.cfg.Fence != FencePrincipal {
		return false
	}
	o, err := c.outside(Record{})
	switch {
	case err != nil:
		c.storeFailed(err)
	case o != nil:
		c.ans = answer{reason: reasonEarlierUnknown, other: o, why: "it began under another fence setting of this tool, or before an upgrade"}
	default:
		return false
	}
	return true
}

// fencePage bounds the records read per listing.
const fencePage = 16
