package storekit

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// ClaimDecision is what [DecideClaim] decides: the claim's answer, and
// what the store writes in the claim's transaction.
type ClaimDecision struct {
	Result ClaimResult
	// Write is set when Result.Record must be written.
	Write bool
	// Occupants are the records, among those the store passed, that the
	// claim changed, to be written in the same transaction: closed as
	// replaced (ClaimRequest.Replace), or with an ended notice cleared.
	Occupants []Record
}

// DecideClaim applies the claim rules to the existing record for req.Key (nil
// if there is none) and to occupants — the record of another key that
// holds the slot of req.Tool and req.FenceScope, if one does, and, for a
// claim fenced by session or by principal ([ClaimRequest.GathersBeside]),
// every record beside that slot ([ClaimRequest.Beside]) —
// and returns what the store writes. nextToken is called only when a new
// claim is made. It is the single source of the rules; a Store calls it
// inside its transaction:
//
//   - no record, or a succeeded/failed record past its expiry: claim;
//   - another principal: OtherPrincipal, nothing changes;
//   - another tool: OtherTool, nothing changes (never replayed across tools);
//   - another fingerprint: OtherInput, nothing changes (checked before
//     anything is written, on every path);
//   - succeeded or failed: returned for replay;
//   - pending with a live lease: returned (the caller waits);
//   - pending with an expired lease: the holder is presumed dead and the
//     outcome is unknown: taken over if req.TakeOver, else turned into an
//     unknown record (fencing out the old holder);
//   - unknown and resolved as not applied (RetryApproved): claimed afresh,
//     which consumes the approval; the new record is marked TakenOver;
//   - unknown: taken over if req.TakeOver, else returned;
//   - a takeover only by a tool that sends the action as it was sent: a
//     req.TakeOver whose Definition sends it otherwise than the record's
//     ([SentAlike]: the reference handed the destination another way, or
//     in another form) is decided as a claim without TakeOver — an unknown
//     record is returned, a lapsed pending one turned unknown. Resent or
//     checked that other way, the destination would not find the first
//     request, and could do it twice. A claim with no Definition (an
//     operator's) takes over any. The record a claim makes says how its
//     attempt is sent: a takeover alike keeps the record's Definition; an
//     approved retry (a new attempt) takes the claim's, and so does a
//     takeover of a record that cannot say (0, lowest bit set);
//   - failed, replaced by another action (Record.ReplacedBy), with
//     req.Replace: claimed afresh in place of req.Replace as a new write of
//     the scope (the slot decides), marked TakenOver. With no fence scope
//     (a tool whose fence is off, or an operator settling a replaced
//     action proved applied aside from its scope), claimed outside any
//     slot: whoever holds the slot, nothing is closed or held back, and
//     the record holds no slot (it is beside its session's slot while it
//     is pending, or succeeded with a notice: [Record.Beside]).
//
// The slot (the unknown fence, invariant I9): a claim that would make a
// pending record of a key that does not hold the slot yet is granted only
// if no other record of the tool and fence scope holds it
// ([Record.HoldsSlot]) — one write at a time per tool and scope, and none
// while an earlier one is unknown:
//
//   - no occupant: granted, and the new record holds the slot;
//   - an occupant whose notice has ended: its notice is cleared, granted;
//   - req.Replace names the occupant as it is (held by Replace.Token, or
//     approved for a retry after Replace.Attempts attempts): the occupant
//     is closed as failed, replaced by req.Key, and the claim granted with
//     Record.Replaces set;
//   - any other occupant (running, held by a holder that may be dead,
//     unknown, approved for a retry, or settled applied within its
//     notice): not granted; ClaimResult.Blocked is the occupant, and
//     nothing is written but this: a claim that answers a model
//     (req.NoticeHold) of the noticed action's session, held back by its
//     notice, tells that model of the action, whose notice then ends
//     NoticeHold later at the latest (a Decision.Occupants record).
//
// A succeeded record answered to a claim of its own key that answers a
// model tells the model too: its notice is shortened the same way, and
// written (Write, the record as found).
//
// A claim of a new key that answers a model, held back by the notice of
// an action proved applied — the slot's holder settled applied within its
// notice, or a record of its session that awaits its model's notice of
// the action it stands in for ([Record.NoticeOf]) — is itself recorded:
// its key is written closed as failed, standing for that action
// (Record.StandsFor), with the claim's KeyTTL for a lifetime, holding no
// slot ([Record.HeldBack]; Write, ClaimResult.Record). Its model was told
// that the action was done and this one not run; asked for again, word
// for word, after the notice has ended, it is answered the same, never
// run: it may be that action reworded. (A claim with no KeyTTL writes
// nothing.) So is a claim of a new key whose call found done the action
// that held it back (req.FoundApplied), whatever holds the slot by then:
// not granted, it stands for that action, unless the notice of another
// holds it back now (it stands for the one its call is told of).
//
// A record that stands in for an action proved applied
// ([Record.AwaitsNotice]: it went on in that action's place, which may be
// it reworded) holds back, while its mark lasts, the claims of its
// session that answer a model — its own (a resend, a takeover, an
// approved retry; or, closed as replaced since, the action asked for
// again: Blocked is the record itself) and, as the slot's holder, any
// other, even one in its place (req.Replace naming it) — and the first
// tells the model: the mark then ends NoticeHold later. Another
// conversation's claim, a person's, a sweeper's pass it; one that goes on
// in its place closes it with its mark. A takeover keeps the mark, and
// what the action went on in place of, and so does an unknown outcome
// ([DecideFinish]).
//
// An action of the scope that holds no slot the claim asks for holds it
// back as the slot's holder would: for a claim fenced by session, an
// action of its tool and session claimed under another fence setting, or
// by a version before slots, in a state that would hold the slot; for a
// claim fenced by principal, such an action of its tool and principal
// that holds no slot at all — claimed under FenceOff, by a version before
// slots, or settled applied aside from its scope ([ClaimRequest.Beside]).
// For a claim of its session that answers a model, so does a record
// closed as replaced under a principal's fence that keeps its mark
// unheard ([Record.AwaitsNotice]): the write in its place may be another
// conversation's, and the session's next write goes on in that one's
// place; it holds back no other claim, and holds back a takeover or an
// approved retry of the slot's holder too. A model is told of an action
// once: the claim held back and told by one mark or notice tells with it
// the others of its conversation about that action it meets. Each occupant is decided as above — closed by
// req.Replace, its ended notice cleared, or holding the claim back (the
// first that does is ClaimResult.Blocked, taken in this order whatever
// the store's: the slot's holder, the records of the claim's session, the
// others, each by key) — except that actions beside the
// slot do not hold back a takeover of the record that holds it already,
// and hold back an approved retry of that record (a new write) only while
// they await reconciliation ([Record.AwaitsReconciliation]): an action
// beside the slot approved for a retry itself waits for the holder's, so
// that two approved actions never wait on each other. One more holds
// back both, for a claim that answers a model (req.NoticeHold): an action
// beside the slot settled applied whose notice lasts (one proved applied
// after a write went on in its place, which may be that action reworded)
// — the model hears of it before the holder runs again, and the notice
// then ends as above. A person's or a sweeper's claim passes it.
//
// A store that went back in time a short while ago decides an Unkeyed
// claim with [DecideLost] instead.
func DecideClaim(existing *Record, occupants []Record, req ClaimRequest, nextToken func() (uint64, error)) (ClaimDecision, error) {
	return decideClaim(existing, false, occupants, req, nextToken)
}

// DecideLost decides the claim of a key in a store that may have lost its
// latest writes: the store went back in time at since (a failover to a
// standby that had not received the primary's last writes, noticed then)
// a short while ago, and req is Unkeyed. existing is the key's record as
// the store has it, nil if none. A record that would let the claim start
// an attempt ([Record.Superseded]: none, one past its expiry, or one
// approved for a retry) proves nothing then — a claim made after it may
// be what the store lost — and the key is decided as if its record were
// pending under a holder that died at since (or at req.Now, if since is
// later), with no attempt counted: the rules of a lapsed lease.
//
//   - req.TakeOver (a reconcilable tool with a reconciler): taken over,
//     TookOver with HeldUntil since: the destination is asked first;
//   - otherwise: recorded unknown, and returned as found (nothing runs
//     until a reconciler, an approver or an operator settles it; an
//     approval the record carried is spent: the approved attempt may have
//     run).
//
// Any other record is decided by [DecideClaim], except that a takeover
// of it counts its last attempt as sent at since at the earliest
// (ClaimResult.HeldUntil): the record is what the store kept, and a claim
// of it made after it, and the attempt that claim sent, may be what the
// store lost. So a replaced action asked for again in its replacement's
// place, by a claim that may take over (req.TakeOver), is a takeover
// too, Lost: the destination is asked first. A record of another
// principal, tool or input is that conflict, whatever its state. The presumed record holds no slot yet: the slot's holder,
// and the records beside it, hold the claim back as they hold back a new
// one (ClaimResult.Blocked, nothing written). ClaimResult.Lost is set.
func DecideLost(since time.Time, existing *Record, occupants []Record, req ClaimRequest, nextToken func() (uint64, error)) (ClaimDecision, error) {
	if req.Now.Before(since) {
		since = req.Now
	}
	if existing != nil && !existing.expired(req.Now) {
		if d, err, ok := mismatch(existing, req); ok {
			return d, err
		}
	}
	if existing != nil && !existing.Superseded(req.Now) {
		d, err := DecideClaim(existing, occupants, req, nextToken)
		switch {
		case d.Result.TookOver && d.Result.HeldUntil.Before(since):
			d.Result.HeldUntil = since
		case d.Result.Claimed && !d.Result.TookOver && req.TakeOver && goesOnAgain(existing, req):
			// A replaced action asked for again, by a call that may take
			// it over: the old primary may have claimed it so, and sent
			// an attempt. The destination is asked first.
			d.Result.TookOver, d.Result.HeldUntil, d.Result.Lost = true, since, true
		}
		return d, err
	}
	presumed := Record{
		Key: req.Key, Tool: req.Tool, State: Pending, Principal: req.Principal, Session: req.Session,
		Fingerprint: req.Fingerprint, LeaseExpiry: since, Created: since, Updated: since, FenceScope: req.FenceScope,
		Definition: req.Definition, Input: req.Input,
	}
	if existing != nil && !existing.expired(req.Now) {
		// An approved retry: the same action, its attempts and history kept.
		presumed.Created, presumed.Attempts, presumed.Label = existing.Created, existing.Attempts, existing.Label
		presumed.Resolution, presumed.Outcome, presumed.Input = existing.Resolution, existing.Outcome, existing.Input
		presumed.Replaces, presumed.NoticeUntil, presumed.StandsFor = existing.Replaces, existing.NoticeUntil, existing.StandsFor // and its mark (StandsInForApplied)
		if existing.Definition != 0 {
			presumed.Definition = existing.Definition
		}
	}
	d, err := decideClaim(&presumed, true, occupants, req, nextToken)
	if d.Result.Blocked == nil {
		d.Result.Lost = true
	}
	return d, err
}

// Superseded reports whether a claim of r's key at now would start an
// attempt from r — r is past its expiry, or unknown and approved for one
// more attempt — so that a later claim of the key, made before a store
// went back in time, may have been lost with it ([DecideLost]).
func (r *Record) Superseded(now time.Time) bool {
	return r.expired(now) || (r.State == Unknown && r.RetryApproved)
}

// ProvedApplied reports whether an answer that the attempts-th attempt of
// r's action applied it settles r as applied: r is unknown (awaiting
// reconciliation, or approved for one more attempt) and counts that
// attempt (1 to r.Attempts). The action is done if any of its attempts
// applied it: an approval rests on none having applied (each found not
// applied by a person, a check, an approver or the fence, or refused
// before it was sent, given back approved and counted), and a later
// attempt's unknown outcome leaves it done. An answer about an attempt r
// does not count proves nothing of r.
func (r *Record) ProvedApplied(attempts int) bool {
	return r.State == Unknown && attempts >= 1 && attempts <= r.Attempts
}

// TookApproval reports whether the claim that answered res consumed an
// approval for one more attempt ([DecideClaim]: an unknown record
// approved for a retry, claimed afresh).
func (res *ClaimResult) TookApproval() bool {
	return res.Claimed && !res.TookOver && !res.Expired && res.Approved
}

// mismatch decides the claim of req when existing, a current record of its
// key, is unreadable or is another principal's, tool's or input's (ok).
func mismatch(existing *Record, req ClaimRequest) (d ClaimDecision, err error, ok bool) {
	var c Conflict
	switch {
	case !existing.State.Valid():
		return ClaimDecision{}, fmt.Errorf("agenttool: record %s has state %d: %w", req.Key, existing.State, ErrCorrupt), true
	case existing.Principal != req.Principal:
		c = OtherPrincipal
	case existing.Tool != req.Tool:
		c = OtherTool
	case existing.Fingerprint != req.Fingerprint:
		c = OtherInput
	default:
		return ClaimDecision{}, nil, false
	}
	return ClaimDecision{Result: ClaimResult{Conflict: c, Record: *existing}}, nil, true
}

// goesOnAgain reports whether a claim of req starts an attempt of the
// replaced action existing, asked for again in its replacement's place
// (decideClaim).
func goesOnAgain(existing *Record, req ClaimRequest) bool {
	return existing.State == Failed && existing.ReplacedBy != "" && req.Replace != nil
}

func decideClaim(existing *Record, lost bool, occupants []Record, req ClaimRequest, nextToken func() (uint64, error)) (ClaimDecision, error) {
	if req.TakeOver && existing != nil && !SentAlike(existing.Definition, req.Definition) {
		req.TakeOver = false // the action is to be resent or checked as it was sent
	}
	if err := req.Check(); err != nil {
		return ClaimDecision{}, err
	}
	inSlot := !lost && existing != nil && !existing.expired(req.Now) && existing.HoldsSlot() && existing.Slot() == req.Slot()
	// An approved retry of the slot's holder is a new write of the scope.
	retry := inSlot && existing.State == Unknown && existing.RetryApproved
	var held []Record
	for _, o := range occupants {
		switch {
		case o.Key == req.Key || req.FenceScope == (Digest{}):
			continue
		case o.HoldsSlot() && o.Slot() == req.Slot():
		case !req.Beside(&o):
			continue
		case o.closedMarked():
			switch {
			case !o.AwaitsNotice(req.Now):
				// Heard: the claim ends its mark (occupy).
			case !(req.NoticeHold > 0 && o.Session == req.Session):
				continue // it holds back its own conversation's model alone
			} // and every write of it, a takeover or an approved retry of the slot's holder too
		case inSlot && !(retry && o.AwaitsReconciliation(req.Now)) && !(req.NoticeHold > 0 && o.noticeLive(req.Now)):
			continue
		}
		held = append(held, o)
	}
	// Whatever order a store found them in, the slot's holder comes
	// first, then the records beside the slot of the claim's session
	// (whose notice the claim tells), then the others, each by key: the
	// first that holds the claim back is the one its caller answers with,
	// and every store answers with the same.
	slices.SortStableFunc(held, func(a, b Record) int {
		rank := func(r *Record) int {
			switch {
			case r.HoldsSlot() && r.Slot() == req.Slot():
				return 0
			case r.Session == req.Session:
				return 1
			}
			return 2
		}
		return cmp.Or(cmp.Compare(rank(&a), rank(&b)), strings.Compare(a.Key, b.Key))
	})
	// occupy decides each record held: closed by req.Replace, its ended
	// notice cleared, or holding the claim back (blocked).
	occupy := func() (d ClaimDecision, replaces string, blocked bool) {
		for _, o := range held {
			switch {
			case req.NoticeHold > 0 && o.AwaitsNotice(req.Now) && o.Session == req.Session:
				// Nothing of its conversation runs in its place before
				// its model hears of the action it stands in for.
			case o.closedMarked() && !o.AwaitsNotice(req.Now):
				// Its model heard of the action it stands in for, and
				// NoticeHold passed: the mark ends, and the record leaves
				// the slot's side. It keeps its lifetime: a late answer
				// about it may still come.
				o.NoticeUntil, o.StandsFor = time.Time{}, ""
				relife(&o, req)
				d.Occupants = append(d.Occupants, o)
				continue
			case req.Replace != nil && req.Replace.Key == o.Key && req.Replace.matches(&o):
				if !o.StandsInForApplied() {
					o.NoticeUntil, o.StandsFor = time.Time{}, ""
				} // else closed, it keeps its mark: asked for again, it is held back by it
				o.State, o.ReplacedBy, o.Owner, o.LeaseExpiry, o.Input = Failed, req.Key, "", time.Time{}, nil
				o.TakenOver, o.RetryApproved = false, false
				o.Outcome, o.Updated, o.Expires = req.Replace.Outcome, req.Now, req.Now.Add(req.Replace.TTL)
				if req.Replace.Resolution != nil {
					o.Resolution = req.Replace.Resolution
				}
				d.Occupants, replaces = append(d.Occupants, o), o.Key
				continue
			case o.State == Succeeded && !req.Now.Before(o.NoticeUntil):
				o.NoticeUntil = time.Time{}
				relife(&o, req)
				d.Occupants = append(d.Occupants, o)
				continue
			}
			blocked := ClaimDecision{Result: ClaimResult{Blocked: &o}}
			if told, ok := tell(o, req); ok {
				// The call held back by the notice tells the model, of
				// that action once: the other marks of its conversation
				// that name it, and its own notice, are told with it.
				blocked.Occupants = []Record{told}
				for _, h := range held {
					if h.Key == o.Key || !sameNotice(&o, &h) {
						continue
					}
					if told, ok := tell(h, req); ok {
						blocked.Occupants = append(blocked.Occupants, told)
					}
				}
			}
			return blocked, "", true
		}
		return d, replaces, false
	}
	claim := func(tookOver, retry bool, attempts int, created time.Time) (ClaimDecision, error) {
		d, replaces, blocked := occupy()
		if blocked {
			return d, nil
		}
		var heldUntil, since time.Time
		if tookOver {
			heldUntil, since = existing.LeaseExpiry, existing.Updated
		}
		tok, err := nextToken()
		if err != nil {
			return ClaimDecision{}, err
		}
		if created.IsZero() {
			created = req.Now
		}
		scope := req.FenceScope
		if scope == (Digest{}) && existing != nil && !existing.expired(req.Now) && existing.HoldsSlot() {
			scope = existing.FenceScope // a takeover keeps the record in the slot it holds
		}
		rec := Record{
			Key: req.Key, Tool: req.Tool, State: Pending,
			Principal: req.Principal, Session: req.Session, Fingerprint: req.Fingerprint,
			Owner: req.Owner, Token: tok, LeaseExpiry: req.Now.Add(req.Lease),
			Attempts: attempts, Created: created, Updated: req.Now, TakenOver: tookOver || retry,
			Label: req.Label, FenceScope: scope, Replaces: replaces, Definition: req.Definition, Input: req.Input,
		}
		if existing != nil && !existing.expired(req.Now) && keepsDefinition(existing.Definition, req.Definition, tookOver) {
			rec.Definition = existing.Definition // the action was sent under it
		}
		if existing != nil && !existing.expired(req.Now) {
			// A takeover keeps the audit trail and the last outcome seen,
			// the label unless the claim brings one, and what the action
			// went on in place of unless it goes on in another's place now.
			rec.Resolution, rec.Outcome = existing.Resolution, existing.Outcome
			if rec.Label == "" {
				rec.Label = existing.Label
			}
			if rec.Replaces == "" {
				rec.Replaces = existing.Replaces
			}
			if existing.Input != nil {
				rec.Input = existing.Input
			}
			if existing.State == Pending || existing.State == Unknown {
				rec.NoticeUntil, rec.StandsFor = existing.NoticeUntil, existing.StandsFor // the mark of StandsInForApplied stays while it is open
			}
		}
		d.Result = ClaimResult{Claimed: true, TookOver: tookOver, HeldUntil: heldUntil, Since: since, Record: rec,
			Approved: retry && existing.State == Unknown}
		d.Write = true
		return d, nil
	}
	found := func(res ClaimResult) (ClaimDecision, error) { return ClaimDecision{Result: res}, nil }
	if existing == nil || existing.expired(req.Now) {
		d, err := claim(false, false, 0, time.Time{})
		switch {
		case err != nil:
		case d.Result.Blocked != nil:
			heldBack(&d, req)
		case req.FoundApplied != "" && req.NoticeHold > 0 && req.KeyTTL > 0:
			// Its call found the action that held it back done: the
			// slot freed since lets nothing of that call run.
			d = ClaimDecision{}
			heldBack(&d, req)
		}
		d.Result.Expired = d.Result.Claimed && existing != nil
		return d, err
	}
	if d, err, ok := mismatch(existing, req); ok {
		return d, err
	}
	// tellWith tells, with the claim's own record, the records it holds
	// of its conversation about the same action: the model hears of an
	// action once.
	tellWith := func() []Record {
		var out []Record
		for _, h := range held {
			if h.Key != existing.Key && sameNotice(existing, &h) {
				if told, ok := tell(h, req); ok {
					out = append(out, told)
				}
			}
		}
		return out
	}
	if req.NoticeHold > 0 && existing.AwaitsNotice(req.Now) {
		// It went on in place of an action proved applied since: its
		// model hears of that before it runs again.
		told, wrote := tell(*existing, req)
		d := ClaimDecision{Result: ClaimResult{Record: told, Blocked: &told}, Write: wrote}
		if wrote { // told already, it told the others then
			d.Occupants = tellWith()
		}
		return d, nil
	}
	if goesOnAgain(existing, req) {
		// A replaced action asked for again goes on in place of its
		// replacement, as any new write of the scope would: the slot
		// decides.
		return claim(false, true, existing.Attempts, existing.Created)
	}
	if told, ok := tell(*existing, req); ok {
		// Its own call reads that the action was done: the model is told.
		return ClaimDecision{Result: ClaimResult{Record: told}, Write: true, Occupants: tellWith()}, nil
	}
	switch existing.State {
	case Pending:
		if req.Now.Before(existing.LeaseExpiry) {
			return found(ClaimResult{Record: *existing})
		}
		// The dead holder claimed in order to attempt: count its attempt,
		// whose outcome nobody knows. A record presumed lost counts none:
		// nobody knows that it was ever claimed.
		attempts := existing.Attempts + 1
		if lost {
			attempts = existing.Attempts
		}
		if req.TakeOver {
			return claim(true, false, attempts, existing.Created)
		}
		var d ClaimDecision
		var replaces string
		if lost { // it holds no slot yet
			var blocked bool
			if d, replaces, blocked = occupy(); blocked {
				return d, nil
			}
		}
		tok, err := nextToken()
		if err != nil {
			return ClaimDecision{}, err
		}
		// The lapsed lease stays on the record: whoever takes it over learns
		// until when the dead holder's attempt may have been in flight.
		rec := *existing
		rec.State, rec.Token, rec.Owner, rec.Updated = Unknown, tok, "", req.Now
		rec.Attempts = attempts
		if lost {
			rec.Label, rec.Replaces = req.Label, replaces
		}
		d.Result, d.Write = ClaimResult{Record: rec}, true
		return d, nil
	case Unknown:
		if existing.RetryApproved {
			return claim(false, true, existing.Attempts, existing.Created)
		}
		if req.TakeOver {
			return claim(true, false, existing.Attempts, existing.Created)
		}
	}
	return found(ClaimResult{Record: *existing})
}

// heldBack records, in d, the claim req of a new key held back — by
// d.Result.Blocked, if that is the notice of an action proved applied, or
// by req.FoundApplied — if the claim answers a model: its key closed as
// failed, standing for that action ([DecideClaim]): the one its call is
// told of.
func heldBack(d *ClaimDecision, req ClaimRequest) {
	applied, notice := req.FoundApplied, false
	if b := d.Result.Blocked; b != nil {
		if key, ok := b.NoticeOf(req.Session, req.Now); ok {
			applied, notice = key, true
		}
	}
	if applied == "" || req.NoticeHold <= 0 || req.KeyTTL <= 0 {
		return
	}
	held := Record{
		Key: req.Key, Tool: req.Tool, State: Failed, Principal: req.Principal, Session: req.Session,
		Fingerprint: req.Fingerprint, Created: req.Now, Updated: req.Now, Expires: req.Now.Add(req.KeyTTL),
		Label: req.Label, FenceScope: req.FenceScope, Definition: req.Definition, StandsFor: applied,
	}
	d.Result.Record, d.Write = held, true
	if !notice {
		d.Result.Blocked = &held // held back by its call's own finding
	}
}

// NoticeOf reports whether r, holding back at now a claim of session,
// does so as the notice of an action proved applied, and names that
// action: r itself, settled applied within its notice; or the action r's
// mark names (Record.StandsFor: "" for a mark made by an earlier
// version), r a record of session that awaits its model's notice of it
// ([Record.AwaitsNotice]). ok is false if r holds the claim back for
// another reason: it runs, or its outcome is unknown, or it is approved
// for one more attempt. The caller answers earlier_action_applied when
// ok.
func (r *Record) NoticeOf(session Digest, now time.Time) (applied string, ok bool) {
	switch {
	case r.AwaitsNotice(now) && r.Session == session:
		return r.StandsFor, true
	case r.State == Succeeded:
		return r.Key, true
	}
	return "", false
}

// HeldBack reports whether r records a claim that the notice of an action
// proved applied held back ([DecideClaim]): failed, standing for that
// action (Record.StandsFor), with no mark. Its key's calls are answered
// that the action was done and theirs not run.
func (r *Record) HeldBack() bool {
	return r.State == Failed && r.StandsFor != "" && r.NoticeUntil.IsZero()
}

// keepsDefinition reports whether a claim of definition def, granted on a
// live record of definition made, keeps made on the record. The record
// says how its action's attempts handed the destination the reference
// (Record.Definition, [SentAlike]), and the claim's attempt is sent as def
// sends it: a takeover alike (a resend, a check) keeps made, which sends
// it the same way; a new attempt (an approved retry, a replaced action
// going on) is sent def's way, its earlier attempts found not applied, and
// so is a takeover of a record that cannot say (0, or an earlier
// version's one digest). A claim that says nothing (def 0: an
// operator's) keeps made.
func keepsDefinition(made, def uint64, tookOver bool) bool {
	switch {
	case def == 0:
		return made != 0
	case made == 0 || made&1 == 1:
		return false
	}
	return tookOver
}

// UntilTold is the mark of an open record whose model has not been told
// yet of the action it stands in for (Record.NoticeUntil): it lasts until
// a claim of its session that answers a model is held back by it.
// It is the last whole second of Unix nanoseconds (in 2262), which every
// store keeps exactly.
var UntilTold = time.Unix(math.MaxInt64/int64(time.Second), 0).UTC()

// StandsInForApplied reports whether r is open (pending or unknown) and
// marked as an action that went on in place of another which was proved
// applied after it went on — which it may be, reworded: a person should
// not approve one more attempt of it without looking.
func (r *Record) StandsInForApplied() bool {
	return (r.State == Pending || r.State == Unknown) && !r.NoticeUntil.IsZero()
}

// marked reports whether r carries the mark of StandsInForApplied: open,
// or failed since it was marked — closed as replaced (asked for again, it
// would go on in its replacement's place), or its attempt refused.
func (r *Record) marked() bool {
	return !r.NoticeUntil.IsZero() && (r.State == Pending || r.State == Unknown || r.State == Failed)
}

// AwaitsNotice reports whether r is marked as standing in for an action
// proved applied ([Record.StandsInForApplied]; closed as replaced since,
// it keeps the mark) and its model has not heard of that action, or
// heard less than NoticeHold ago, at now: a claim of its session that
// answers a model is held back by it — its own (a resend, a takeover, an
// approved retry, or, closed as replaced, a call of it asked for again)
// and any in its place — and tells the model.
func (r *Record) AwaitsNotice(now time.Time) bool {
	return r.marked() && now.Before(r.NoticeUntil)
}

// noticeLive reports whether r is an action settled applied whose model
// has not been told yet (its notice lasts at now).
func (r *Record) noticeLive(now time.Time) bool {
	return r.State == Succeeded && now.Before(r.NoticeUntil)
}

// tell returns r with its notice shortened to req's NoticeHold, if r is a
// succeeded record whose notice lasts longer and req is of r's session: a
// call answered now with r, or held back by its notice, tells the model
// that r's action was done — the model of the conversation that made the
// action. So is an open record's mark ([Record.AwaitsNotice]): the model
// is told of the action r stands in for. Another conversation's call held back by it (a fence by
// principal) tells that one nothing.
func tell(r Record, req ClaimRequest) (Record, bool) {
	end := req.Now.Add(req.NoticeHold)
	if req.NoticeHold <= 0 || !(r.State == Succeeded || r.marked()) || r.Session != req.Session || r.NoticeUntil.IsZero() || !r.NoticeUntil.After(end) {
		return r, false
	}
	r.NoticeUntil = end
	relife(&r, req)
	return r, true
}

// relife gives r, a record whose mark or notice req tells or ends, the
// lifetime of req's tool from req.Now, if a version before this one left
// it the mark's end (UntilTold) for a lifetime ([ClaimRequest.KeyTTL]).
func relife(r *Record, req ClaimRequest) {
	if r.Expires.Equal(UntilTold) && req.KeyTTL > 0 {
		r.Expires = req.Now.Add(req.KeyTTL)
	}
}

// sameNotice reports whether telling a model of r's notice tells it of
// h's: both of one conversation, and about one action — marks that name
// it, or its own notice.
func sameNotice(r, h *Record) bool {
	about := func(x *Record) string {
		if x.State == Succeeded {
			return x.Key
		}
		if x.marked() {
			return x.StandsFor
		}
		return ""
	}
	a := about(r)
	return r.Session == h.Session && a != "" && a == about(h)
}

// matches reports whether occupant is the record r names, as the caller
// found it.
func (r *Replacement) matches(occupant *Record) bool {
	if r.Token != 0 {
		return occupant.State == Pending && occupant.Token == r.Token
	}
	return occupant.State == Unknown && occupant.RetryApproved && occupant.Attempts == r.Attempts
}

// Slot names the slot of a tool and fence scope: at most one record holds
// it at a time ([Record.HoldsSlot]).
type Slot struct {
	Tool  string
	Scope Digest
}

// Slot returns the slot r belongs to.
func (r *Record) Slot() Slot { return Slot{r.Tool, r.FenceScope} }

// Slot returns the slot the claim's record would hold.
func (req *ClaimRequest) Slot() Slot { return Slot{req.Tool, req.FenceScope} }

// Check returns an error wrapping [ErrInvalidRequest] if req is not a
// claim [DecideClaim] can decide — a lease that is not positive, a
// replacement with no lifetime — whatever the store holds: a store that
// decides some claims without DecideClaim checks them first.
func (req *ClaimRequest) Check() error {
	if req.Lease <= 0 {
		return fmt.Errorf("agenttool: claim of %s with lease %v: %w", req.Key, req.Lease, ErrInvalidRequest)
	}
	if req.Replace != nil && req.Replace.TTL <= 0 {
		return fmt.Errorf("agenttool: claim of %s in place of %s with lifetime %v: %w", req.Key, req.Replace.Key, req.Replace.TTL, ErrInvalidRequest)
	}
	return nil
}

// Beside reports whether r is beside its session's slot: claimed under a
// fence other than its session's — its principal's, or none (FenceOff, a
// version before slots, or an action settled aside from its scope) — in
// a state that would hold the session's slot had it been claimed there:
// pending, unknown (resolved or not), or succeeded with a notice. Stores
// index these records by tool, principal and session, so that a claim
// fenced by session, or by principal, finds them ([ClaimRequest.Beside]);
// records of the default, per-session fence are never among them.
//
// So is a record closed as replaced that keeps its mark
// ([Record.AwaitsNotice]), whatever its fence: under a principal's fence
// the write in its place may be another conversation's, and its own
// conversation's next write would go on in that one's place, not its
// own; found beside the slot, the mark holds it back until its model is
// told. Under any fence, the claim held back and told by another mark of
// its conversation about that action finds it, and tells it with it: a
// model is told of an action once, and the mark ends.
func (r *Record) Beside() bool {
	return r.closedMarked() || r.FenceScope != r.Session &&
		(r.State == Pending || r.State == Unknown || (r.State == Succeeded && !r.NoticeUntil.IsZero()))
}

// closedMarked reports whether r is failed — closed as replaced, or its
// attempt refused — and keeps a mark.
func (r *Record) closedMarked() bool {
	return r.State == Failed && !r.NoticeUntil.IsZero()
}

// FencedBySession reports whether req is fenced by its session (its fence
// scope is its session): the records beside its slot hold it back, and a
// store passes them to [DecideClaim] with the slot's holder.
func (req *ClaimRequest) FencedBySession() bool {
	return req.FenceScope != (Digest{}) && req.FenceScope == req.Session
}

// FencedByPrincipal reports whether req is fenced by its principal (its
// fence scope is its principal): the records of its tool and principal
// beside their session's slot that hold no slot at all hold it back, and
// a store passes them to [DecideClaim] with the slot's holder.
func (req *ClaimRequest) FencedByPrincipal() bool {
	return req.FenceScope != (Digest{}) && req.FenceScope == req.Principal
}

// Beside reports whether o, a record of another key, is beside req's slot
// ([Record.Beside]) and so holds back req's claim as the slot's holder
// would. For a claim fenced by session: o is of the same tool, principal
// and session (a session is one principal's: agenttool digests the two
// together). For a claim fenced by principal: o is of the same tool and
// principal and holds no slot (claimed under FenceOff, by a version before slots,
// or settled aside from its scope); the records its principal's other
// fence setting left, each in its session's slot, are not the store's to
// find (a read of its index of open records: agenttool's fence).
func (req *ClaimRequest) Beside(o *Record) bool {
	switch {
	case o.Key == req.Key || o.Tool != req.Tool || !o.Beside():
		return false
	case o.Principal != req.Principal:
		return false
	case req.FencedBySession():
		return o.Session == req.Session
	case req.FencedByPrincipal():
		return o.FenceScope == (Digest{}) || o.closedMarked()
	}
	return false
}

// GathersBeside reports whether a store passes [DecideClaim] the records
// beside req's slot: req is fenced by its session or by its principal.
// They are the records of req's tool and principal beside their
// session's slot ([Record.Beside]) — of req's session too, for a claim
// fenced by session — that req.Beside keeps.
func (req *ClaimRequest) GathersBeside() bool {
	return req.FencedBySession() || req.FencedByPrincipal()
}

// HoldsSlot reports whether r holds its slot: it belongs to a fence scope,
// and it is pending (running, or held by a holder that may be dead),
// unknown (resolved or not), or succeeded with a notice (whether or not
// the notice has ended: the next claim of the slot clears it). Stores
// index the records that hold a slot by their slot; at most one record
// holds each.
func (r *Record) HoldsSlot() bool {
	return r.FenceScope != (Digest{}) &&
		(r.State == Pending || r.State == Unknown || (r.State == Succeeded && !r.NoticeUntil.IsZero()))
}

// DecideFinish checks that req.Token still holds the pending record and
// returns the final record to write.
func DecideFinish(existing *Record, req FinishRequest) (Record, error) {
	if req.State != Succeeded && req.State != Failed && req.State != Unknown {
		return Record{}, fmt.Errorf("agenttool: finish %s in state %v: %w", req.Key, req.State, ErrInvalidRequest)
	}
	if err := holds(existing, req.Key, req.Token); err != nil {
		return Record{}, err
	}
	if req.State != Succeeded && !req.NoticeUntil.IsZero() {
		return Record{}, fmt.Errorf("agenttool: finish %s in state %v with a notice: only a succeeded outcome has one (an open record is marked by Store.Mark): %w", req.Key, req.State, ErrInvalidRequest)
	}
	if req.RetryApproved && req.State != Unknown {
		return Record{}, fmt.Errorf("agenttool: finish %s: only an unknown record can be approved for retry: %w", req.Key, ErrInvalidRequest)
	}
	rec := *existing
	rec.State, rec.Owner, rec.LeaseExpiry, rec.TakenOver = req.State, "", time.Time{}, false
	if req.State == Unknown {
		rec.LeaseExpiry = req.HeldUntil
	}
	rec.Attempts, rec.Outcome, rec.Updated = req.Attempts, req.Outcome, req.Now
	rec.RetryApproved = req.RetryApproved
	rec.NoticeUntil, rec.StandsFor = time.Time{}, ""
	switch req.State {
	case Succeeded:
		rec.NoticeUntil = req.NoticeUntil
	case Unknown, Failed:
		// Open still, it keeps its mark (StandsInForApplied); failed,
		// too: the model that hears this write did nothing has not heard
		// of the action it stands in for, which was done. A mark ends by
		// being told, never by a settlement.
		rec.NoticeUntil, rec.StandsFor = existing.NoticeUntil, existing.StandsFor
	}
	if req.State != Unknown {
		rec.Input = nil // settled: nobody needs to find the action by its input
	}
	if req.Resolution != nil {
		rec.Resolution = req.Resolution
	}
	rec.Expires = time.Time{}
	if req.State != Unknown || req.RetryApproved {
		rec.Expires = req.Now.Add(req.TTL)
	}
	return rec, nil
}

// DecideMark decides a mark ([Store.Mark]) on existing, the record of
// req.Key: it returns the record marked, and whether it changed. A record
// that may still run or be asked for again is marked — pending (whoever
// holds it, live or not), unknown (approved for one more attempt or
// not), or failed: closed as replaced, or refused (its model heard that
// it did nothing, and must hear of the action done in its place before
// its conversation goes on: whichever came first, the refusal or the
// answer, the mark is the same) — if it is of req.Session; its mark becomes
// the later of its own and req.Until, and it names the action it stands
// in for (Record.StandsFor): req.For, the latest mark's — its model,
// told of one before, is told of this one too. The record keeps its
// lifetime (Expires), and is kept while the mark lasts ([Record.SweepAt]).
// A succeeded record is left as it is (its own answer told its model
// that it was done), and so are a held-back one ([Record.HeldBack]: its
// answer named an action done), another conversation's, and one past its
// lifetime at req.Now (asked for again, it is a new action).
func DecideMark(existing *Record, req MarkRequest) (Record, bool, error) {
	if req.Until.IsZero() {
		return Record{}, false, fmt.Errorf("agenttool: mark of %s with no end: %w", req.Key, ErrInvalidRequest)
	}
	if req.For == "" {
		return Record{}, false, fmt.Errorf("agenttool: mark of %s names no action it stands in for: %w", req.Key, ErrInvalidRequest)
	}
	if existing == nil {
		return Record{}, false, fmt.Errorf("agenttool: mark of %s: %w", req.Key, ErrNotFound)
	}
	rec := *existing
	open := rec.State == Pending || rec.State == Unknown || rec.State == Failed && !rec.HeldBack()
	later := req.Until.After(rec.NoticeUntil)
	if !open || rec.Session != req.Session || rec.expired(req.Now) || !later && rec.StandsFor == req.For {
		return rec, false, nil
	}
	if later {
		rec.NoticeUntil = req.Until
	}
	rec.StandsFor = req.For
	return rec, true, nil
}

// DecideRelease checks that token still holds the pending record, which may
// then be deleted.
func DecideRelease(existing *Record, key string, token uint64) error {
	return holds(existing, key, token)
}

// DecideRenew checks that req.Token still holds the pending record and
// returns it with its lease extended until req.Until.
func DecideRenew(existing *Record, req RenewRequest) (Record, error) {
	if err := holds(existing, req.Key, req.Token); err != nil {
		return Record{}, err
	}
	rec := *existing
	rec.LeaseExpiry, rec.Updated = req.Until, req.Now
	return rec, nil
}

// Sweepable reports whether a Sweep at now may delete r.
func (r *Record) Sweepable(now time.Time) bool { return r.expired(now) }

// SweepAt returns when r may be swept, if it is final then: the end of its
// lifetime (Expires), or of its notice or mark (NoticeUntil) if that ends
// later — a record is kept while it carries one, so that a sweep never
// decides whether a reworded copy of an action is held back, and a late
// answer about it finds it for its lifetime after. Zero if r has no
// lifetime (pending, or unknown and not resolved). Stores index records
// by it, and index a record again when a write changes it: a mark, and
// the telling that ends it, change it as a settlement does.
func (r *Record) SweepAt() time.Time {
	if r.Expires.IsZero() || !r.NoticeUntil.After(r.Expires) {
		return r.Expires
	}
	return r.NoticeUntil
}

func (r *Record) expired(now time.Time) bool {
	final := r.State == Succeeded || r.State == Failed || (r.State == Unknown && r.RetryApproved)
	at := r.SweepAt()
	return final && !at.IsZero() && !now.Before(at)
}

// AwaitsReconciliation reports whether r is listed by [Store.ListUnknown] at
// now: an unknown record not resolved yet, or a pending one whose lease has
// expired.
func (r *Record) AwaitsReconciliation(now time.Time) bool {
	return (r.State == Unknown && !r.RetryApproved) || (r.State == Pending && !now.Before(r.LeaseExpiry))
}

// Open reports whether r may come to await reconciliation: pending, or
// unknown and not resolved. Stores index the open records, so that listing
// what awaits reconciliation reads only them.
func (r *Record) Open() bool {
	return r.State == Pending || (r.State == Unknown && !r.RetryApproved)
}

// Lists reports whether r is listed by req at req.Now: it matches req's
// filters, and awaits reconciliation.
func (req *ListRequest) Lists(r *Record) bool {
	return req.Matches(r) && r.AwaitsReconciliation(req.Now)
}

// Matches reports whether r is selected by the filters of req (principal,
// tool, session), whatever its state.
func (req *ListRequest) Matches(r *Record) bool {
	return (req.Principal == nil || *req.Principal == r.Principal) &&
		(req.Tool == "" || req.Tool == r.Tool) &&
		(req.Session == nil || *req.Session == r.Session)
}

func holds(existing *Record, key string, token uint64) error {
	if existing == nil {
		return fmt.Errorf("agenttool: %s has no record: %w", key, ErrFenced)
	}
	if existing.State != Pending || existing.Token != token {
		return fmt.Errorf("agenttool: %s is %v with token %d, not pending with token %d: %w",
			key, existing.State, existing.Token, token, ErrFenced)
	}
	return nil
}

// String returns the digest in hex.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// MarshalText writes the digest in hex.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a digest written by MarshalText.
func (d *Digest) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(d) {
		return fmt.Errorf("agenttool: digest of %d hex digits, want %d", len(b), 2*len(d))
	}
	_, err := hex.Decode(d[:], b)
	return err
}
