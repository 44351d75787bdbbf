package agenttool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// Invoke runs one guarded call and returns its envelope; [Tool.Call] is
// Invoke for agents. The life of a call, phase by phase (see
// docs/life-of-a-call.md for every move):
//
//	parse and check the input; derive key and fingerprint once
//	claim    the key in the store, and the slot of the tool in the fence's
//	         scope (fail closed if the store cannot answer)
//	  other principal, tool or input     → refused, nothing runs
//	  the action settled                 → replay it, the tool does not run
//	  another call runs this action      → wait (bounded), then in_progress
//	  another action of the scope runs   → wait (bounded), then in_progress naming it
//	  another action of the scope is unknown
//	                         → fence: ask the destination about it first
//	                           (applied → this call is held, the user hears of it;
//	                           not applied → claim in its place)
//	  another action was just found done → held: the user hears of it first
//	  the action is unknown, not the call's to take over
//	                         → at-most-once: approve (the approver, or a person)
//	  taken over from an unknown outcome → check own: ask the destination first
//	                                       (keyed: attempt again with the same key)
//	  no record, but the store went back in time (a failover) a short while
//	  ago and may have lost it → as a lapsed lease: taken over and checked
//	                             (reconcilable), or unknown (at-most-once)
//	attempt  the tool; back off and attempt again where the key makes it safe;
//	         check attempt: ask the destination after an unknown attempt
//	record   the outcome (or give back the key: nothing was applied)
func (t *Tool) Invoke(ctx context.Context, raw string) envelope.Envelope {
	hk := &t.cfg.Hooks
	if hk.Start == nil && hk.Outcome == nil {
		env, _ := t.invoke(ctx, raw)
		return env
	}
	start := t.cfg.Now()
	if hk.Start != nil {
		if started := hk.Start(ctx, StartEvent{Tool: t.name, Class: t.cfg.Class}); started != nil {
			ctx = started
		}
	}
	env, c := t.invoke(ctx, raw)
	if hk.Outcome != nil {
		e := OutcomeEvent{Envelope: env, Class: t.cfg.Class, Duration: t.cfg.Now().Sub(start)}
		if c != nil {
			e.Path = c.pathString()
		}
		hk.Outcome(ctx, e)
	}
	return env
}

func (t *Tool) invoke(ctx context.Context, raw string) (envelope.Envelope, *call) {
	scope, ok := ScopeFrom(ctx)
	if !ok || !scope.valid() {
		if t.cfg.DefaultScope == nil {
			// The application forgot its part: say so to whoever runs it,
			// not only to the model.
			t.cfg.logger.Warn("retrysafe: a call without a scope was refused; set one with agenttool.WithScope", "tool", t.name)
			return t.answerFor("", answer{reason: reasonMissingScope}), nil
		}
		scope = *t.cfg.DefaultScope
	}
	in, bad := t.parse(raw)
	if bad != nil {
		return t.answerFor("", answer{reason: reasonInvalidInput, input: bad}), nil
	}
	c := &call{t: t, ctx: ctx, work: ctx, args: in.args, scope: scope}
	c.principal, c.session = t.scopeDigests(scope)
	c.ref, c.owner = t.cfg.refAndOwner(t.name, scope, actionIDFrom(ctx), in.identifying)
	if bad := t.refusedInput(ctx, c, in); bad != nil {
		return t.answerFor("", answer{reason: reasonInvalidInput, input: bad}), nil
	}
	if err := ctx.Err(); err != nil {
		return t.answerFor(c.ref, answer{reason: reasonCancelled, err: err}), c
	}
	if t.cfg.Class == ReadOnly {
		c.phase = phaseAttempt
	} else {
		c.phase = phaseClaim
		c.request(in.fingerprint)
		if t.cfg.KeepInput {
			sealed, err := t.cfg.inputCodec.Encode(c.ref, in.canonical)
			if err != nil {
				// The input is kept only as the codec encodes it: without
				// it, nothing runs that a check could not find later.
				return t.answerFor(c.ref, answer{reason: reasonStoreUnavailable,
					err: fmt.Errorf("the codec could not encode the input the tool keeps: %w", err)}), c
			}
			c.req.Input, c.input = sealed, in.canonical
		}
	}
	return c.run(), c
}

// refusedInput asks a wrapped InputChecker about the call's input, and
// returns its refusal, or nil. A refusal never hides a record: an input
// the store already holds for this action (recorded before the check
// refused it — a server's schema that changed, a version without the
// check) goes on, to be replayed or settled as any repeat is, rather than
// told that nothing was done.
func (t *Tool) refusedInput(ctx context.Context, c *call, in input) *envelope.Error {
	if t.checkInput == nil {
		return nil
	}
	err := t.checkInput(in.forward)
	if err == nil {
		return nil
	}
	if cfg := t.cfg; cfg.Class != ReadOnly {
		sctx, cancel := context.WithTimeout(ctx, cfg.StoreTimeout)
		rec, gerr := cfg.Store.Get(sctx, c.ref)
		cancel()
		if gerr == nil && rec.Fingerprint == in.fingerprint && rec.Principal == c.principal && rec.Tool == t.name && !rec.Sweepable(cfg.Now()) {
			return nil
		}
	}
	return invalid(err.Error())
}

// call is one guarded call: where it is in its life, and what it knows.
type call struct {
	t   *Tool
	ctx context.Context
	// work is the context of what the call does while it holds its key
	// (attempts, checks, backoff): ctx, cancelled with ErrLeaseLost when
	// the key's lease cannot be kept.
	work     context.Context
	stopWork context.CancelCauseFunc
	args     args
	input    []byte // the canonical input, kept for the reconciler (Options.KeepInput)
	scope    Scope
	// principal and session are the scope's digests, as records keep them.
	principal, session Digest
	ref                string
	owner              string // the lease owner of the call's claims

	phase phase
	path  [maxPath]phase // the phases gone through (the first maxPath)
	moves int

	req     storekit.ClaimRequest
	claims  int                   // claims made, bounded by maxClaims
	replace *storekit.Replacement // the next claim goes on in place of this action
	held    *holding              // the action the fence found not applied, held until the claim in its place
	other   Record                // the record the last claim met: the key's, or the slot's occupant
	waitEnd time.Time             // when waiting for another holder ends (WaitTimeout)
	waited  time.Time             // when waiting began
	poll    time.Duration

	// While the call holds its key:
	token   uint64
	claimed Record // the record as the call's claim made it
	effect  effect // what may have happened to the action
	// leaseUntil is the end of the claim's lease; heldUntil, after a
	// takeover, the end of the earlier holder's (see storekit.ClaimResult);
	// lastSent the latest time an attempt of the action may have been sent.
	leaseUntil, heldUntil, lastSent time.Time
	attempt                         int   // the action's attempts, this call's included
	tries                           int   // attempts this call made
	cause                           error // why the action's outcome is what it is
	policy                          *backoff.ExponentialBackOff
	replayedAt                      atomic.Int64 // the last attempt the destination said it replayed (DestinationReplayed)
	replayedAnother                 atomic.Int64 // the last attempt the tool knows it replayed another call's request for
	expired                         bool         // the call's claim was granted over the key's expired record (storekit.ClaimResult.Expired)

	final State  // the state the record phase writes
	ans   answer // what the call answers
	env   envelope.Envelope

	fl    flight     // while the call holds its key
	first attemptCtx // the first attempt's context
}

const (
	maxPath = 24
	// maxChain bounds a walk along the actions that went on one in
	// place of another: a model that rewords after every unknown outcome
	// makes a chain as long as its patience.
	maxChain  = 1024
	maxClaims = 16 // a scope whose slot keeps changing hands under a call
)

// run drives the call through its phases until it is done.
func (c *call) run() envelope.Envelope {
	defer c.end()
	for {
		var o outcome
		switch c.phase {
		case phaseClaim:
			o = c.claim()
		case phaseWait:
			o = c.wait()
		case phaseApprove:
			o = c.approve()
		case phaseFence:
			o = c.fence()
		case phaseCheckOwn, phaseCheckAttempt:
			o = c.check()
		case phaseAttempt:
			o = c.attemptOnce()
		case phaseBackOff:
			o = c.backOff()
		case phaseRecord:
			o = c.record()
		case phaseGiveBack:
			o = c.giveBack()
		case phaseDone:
			c.done()
			return c.env
		}
		c.moveTo(o)
	}
}

// moveTo is the one transition: it records the move and takes the phase
// next chooses. A move next refuses is a bug in the engine: it panics,
// naming the move and the path, and the key's lease lapses (an unknown
// outcome, never a free key).
func (c *call) moveTo(o outcome) {
	to, err := next(c.phase, o, c.facts())
	if err != nil {
		panic(fmt.Sprintf("%v; the call's path: %s", err, c.pathString()))
	}
	if c.moves < maxPath {
		c.path[c.moves] = c.phase
	}
	if to == phaseClaim && c.phase != phaseWait {
		c.claims++
	}
	c.moves++
	c.phase = to
}

// facts is what next decides on.
func (c *call) facts() facts {
	cfg := c.t.cfg
	return facts{
		class: cfg.Class, reconciler: cfg.Reconciler != nil, approver: cfg.Approver != nil,
		effect: c.effect, retriesLeft: c.tries < cfg.Retry.MaxAttempts,
		forgotten: cfg.Class == Keyed && !c.claimed.Created.IsZero() && cfg.keyForgotten(c.claimed.Created),
	}
}

// pathString is the path taken so far, for hooks and failure messages.
func (c *call) pathString() string {
	var b strings.Builder
	for i := range min(c.moves, maxPath) {
		b.WriteString(c.path[i].String())
		b.WriteString(" → ")
	}
	if c.moves > maxPath {
		b.WriteString("… → ")
	}
	b.WriteString(c.phase.String())
	return b.String()
}

// request builds the claim request, once.
func (c *call) request(fp Digest) {
	cfg := c.t.cfg
	c.req = storekit.ClaimRequest{
		Key: c.ref, Tool: c.t.name, Principal: c.principal, Session: c.session, Fingerprint: fp,
		Owner: c.owner, Lease: cfg.Lease, KeyTTL: cfg.KeyTTL,
		// Keyed tools retry with the same key; reconcilable ones take an
		// unknown record over to ask the destination first.
		TakeOver: cfg.Class == Keyed || (cfg.Class == Reconcilable && cfg.Reconciler != nil),
		Unkeyed:  cfg.unkeyed(),
	}
	if cfg.NoticeHold > 0 {
		c.req.NoticeHold = cfg.noticeHold()
	}
	c.req.Definition = cfg.definition
	switch cfg.Fence {
	case FenceSession:
		c.req.FenceScope = c.session
	case FencePrincipal:
		c.req.FenceScope = c.principal
	}
	if label := labelFrom(c.ctx); label != "" {
		var err error
		if c.req.Label, err = c.t.seal(c.ref, label); err != nil {
			// The label is for people; the action goes on without it
			// rather than store it unencoded.
			cfg.logger.Warn("retrysafe: the codec could not encode the call's label; the record has none", "tool", c.t.name, "ref", c.ref, "err", err)
		}
	}
}

// claim claims the key, and the slot of the fence's scope.
func (c *call) claim() outcome {
	cfg := c.t.cfg
	if c.claims > maxClaims {
		return c.storeFailed(fmt.Errorf("the scope's other actions kept changing under %d claims", maxClaims))
	}
	c.waitForHolderHere()
	req := c.req
	req.Now, req.Replace = cfg.Now(), c.replace
	c.replace = nil
	// A claim is bounded as every store write is (StoreTimeout), so that
	// a slow store cannot eat into the time the call's attempts were
	// given: a claim that takes longer answers store_unavailable, and
	// nothing runs.
	ctx, cancel := context.WithTimeout(c.ctx, cfg.StoreTimeout)
	res, err := cfg.Store.Claim(ctx, req)
	cancel()
	c.letGo(res, err)
	if err != nil {
		read, ok := c.unclaim()
		if res, ok = c.readInstead(req, read, ok); !ok {
			return c.storeFailed(err)
		}
	}
	if o := res.Blocked; o != nil {
		return c.blockedBy(*o, req.Now, res.Record.Key == c.ref && res.Record.HeldBack())
	}
	switch {
	case res.Conflict == storekit.OtherPrincipal:
		return c.answer(claimRefused, answer{reason: reasonOtherPrincipal})
	case res.Conflict == storekit.OtherTool:
		return c.answer(claimRefused, answer{reason: reasonOtherTool})
	case res.Conflict == storekit.OtherInput:
		rec := res.Record
		if rec.HeldBack() {
			// The action was held back for the one it stands for, which
			// was done: that is the earlier request the model hears of.
			rec = c.t.standsInFor(c.ctx, rec)
		}
		return c.answer(claimRefused, answer{reason: reasonOtherInput, other: &rec, now: req.Now})
	case res.Claimed:
		c.begin(res)
		if res.TookOver {
			c.cause = errEarlierAttempt
			if res.Lost {
				c.cause = errStoreWentBack
				c.lostRecord(req.Now)
			}
			if cfg.Class == Keyed && c.facts().forgotten {
				c.cause = errKeyForgotten
				// Without a reconciler, the record goes back as it was.
				c.ans = answer{reason: reasonKeyForgotten, attempts: res.Record.Attempts, created: res.Record.Created, replayed: true}
			}
			return claimTookOver
		}
		if c.beside(res.Record) {
			return claimedBeside
		}
		return claimGranted
	}
	c.other = res.Record
	switch rec := res.Record; rec.State {
	case Succeeded, Failed:
		switch {
		case rec.State == Failed && rec.ReplacedBy != "":
			return c.replaced(rec, req.Replace == nil)
		case rec.HeldBack():
			// A notice held this action back: it is answered as then.
			c.replayed(rec.State)
			a := c.t.toldApplied(c.t.standsInFor(c.ctx, rec))
			a.replayed, a.kept = true, true
			return c.answer(claimSettled, a)
		}
		return c.answer(claimSettled, c.replay(rec))
	case Unknown:
		if cfg.Class != AtMostOnce || cfg.Approver == nil {
			c.replayed(Unknown)
		}
		if res.Lost {
			c.lostRecord(req.Now)
			return c.answer(claimUnknown, answer{reason: reasonStoreWentBack, attempts: rec.Attempts, replayed: true})
		}
		if cfg.sentOtherwise(&rec) {
			return c.answer(claimUnknown, answer{reason: reasonSentOtherwise, attempts: rec.Attempts, other: &rec, replayed: true})
		}
		return c.answer(claimUnknown, answer{reason: reasonUnknownAwaits, attempts: rec.Attempts, replayed: true})
	case Pending:
		return c.answer(claimRunning, answer{reason: reasonInProgress, attempts: rec.Attempts})
	}
	return c.storeFailed(fmt.Errorf("record in state %v: %w", res.Record.State, ErrCorrupt))
}

// lostRecord tells whoever runs the application that the store may have
// lost the call's record: the action is held as unknown.
func (c *call) lostRecord(now time.Time) {
	c.t.cfg.logger.Warn("retrysafe: the store went back in time a short while ago and has no record of this action: it may have lost it, so the action is treated as unknown",
		"tool", c.t.name, "ref", c.ref, "at", now)
}

// blockedBy answers a claim that another action's hold on the scope's
// slot kept from being granted.
func (c *call) blockedBy(o Record, now time.Time, kept bool) outcome {
	c.other = o
	if cfg := c.t.cfg; cfg.otherDefinition(&o) {
		cfg.logger.Warn("retrysafe: an action of this tool made under another definition of it holds the scope: "+
			"replicas or versions that build the tool differently give one request two references; roll such a change out as docs/stores.md says",
			"tool", c.t.name, "ref", c.ref, "held_by", o.Key, "its_definition", definitionName(o.Definition),
			"this_definition", definitionName(cfg.definition), "this_definition_is", cfg.definitionText)
	}
	switch applied, notice := o.NoticeOf(c.session, now); {
	case notice && applied == o.Key:
		// Found done after an unknown outcome, within its notice: the
		// store told the model by this answer, and kept it under the
		// call's key (kept: Record.HeldBack).
		a := c.t.toldApplied(o)
		a.kept = kept
		return c.answer(slotNotice, a)
	case notice:
		// It went on in place of an action proved applied after it went
		// on (it may be that action reworded): the store told the model
		// by this answer, before that write, or anything in its place,
		// runs.
		a := c.t.toldApplied(c.t.standsInFor(c.ctx, o))
		a.kept = kept
		return c.answer(slotNotice, a)
	case o.State == Pending && now.Before(o.LeaseExpiry) && o.TakenOver:
		return c.answer(slotRunning, answer{reason: reasonEarlierUnknown, other: &o, why: "it is being verified right now"})
	case o.State == Pending && now.Before(o.LeaseExpiry):
		return c.answer(slotRunning, answer{reason: reasonEarlierRunning, other: &o})
	case o.State == Pending, o.State == Unknown && !o.RetryApproved:
		return slotUnknown
	case o.State == Unknown:
		// Found not applied, and approved for one more attempt: a new
		// write of the scope takes that attempt, in its place.
		rep, err := c.replacing(o, 0, nil)
		if err != nil {
			return c.storeFailed(err)
		}
		c.replace = rep
		return slotApproved
	}
	return c.storeFailed(fmt.Errorf("the record %s holds the scope's slot in state %v: %w", o.Key, o.State, ErrCorrupt))
}

// toldApplied is the answer of a call that the notice of applied, an
// action found done after its outcome was unknown, held back: this call
// was not run. applied is the action's record, or its key alone if it is
// no longer kept, or zero if nothing names it (a mark made by an earlier
// version).
func (t *Tool) toldApplied(applied Record) answer {
	a := answer{reason: reasonEarlierApplied}
	if applied.Key != "" {
		a.other, a.result = &applied, t.storedResult(applied)
	}
	if applied.Replaces != "" {
		a.reason = reasonEarlierDone
	}
	return a
}

// standsInFor returns the action proved applied that o stands in for
// (o.StandsInForApplied), or that held o back (o.HeldBack): the one
// Record.StandsFor names, with its result while its record is kept — it
// expires with its key and notice — or, no longer found (or found made
// after o: a new action of its input), its key alone. A record marked by an
// earlier version names none: the first succeeded record of o's
// conversation along the actions o replaced, one after another, is taken
// for it; if the walk meets a record no longer kept, which may have been
// that action or another conversation's, none is named (a zero Record).
func (t *Tool) standsInFor(ctx context.Context, o Record) Record {
	if o.StandsFor != "" {
		// A record of that key made after o is a new action of the same
		// input, the one named having expired: not the one done.
		if r, err := t.cfg.Store.Get(ctx, o.StandsFor); err == nil && r.State == Succeeded && !r.Created.After(o.Created) {
			return r
		}
		return Record{Key: o.StandsFor, State: Succeeded}
	}
	key := o.Replaces
	for range maxChain {
		r, err := t.cfg.Store.Get(ctx, key)
		switch {
		case err != nil:
			return Record{}
		case r.State == Succeeded && r.Session == o.Session:
			return r
		case r.Replaces == "":
			return Record{}
		}
		key = r.Replaces
	}
	return Record{}
}

// replacing is the replacement of o by this call's action: what o's record
// becomes when the call's claim goes on in its place. token is the hold on
// o (0 if o is approved for a retry).
func (c *call) replacing(o Record, token uint64, res *Resolution) (*storekit.Replacement, error) {
	return c.t.replacing(o, c.ref, token, res)
}

// replacing is the replacement of o by the action of key by: what o's
// record becomes when by's claim goes on in its place. token is the hold
// on o (0 if o is approved for a retry).
func (t *Tool) replacing(o Record, by string, token uint64, res *Resolution) (*storekit.Replacement, error) {
	env := t.answerFor(o.Key, answer{reason: reasonReplaced, attempts: o.Attempts, other: &Record{Key: by, State: Pending}})
	b, err := env.Marshal()
	if err == nil {
		b, err = t.cfg.codec.Encode(o.Key, b)
	}
	if err != nil {
		return nil, fmt.Errorf("encoding the outcome of %s, replaced: %w", o.Key, err)
	}
	if res != nil {
		if res, err = t.sealResolution(o.Key, res); err != nil {
			return nil, err
		}
	}
	return &storekit.Replacement{Key: o.Key, Token: token, Attempts: o.Attempts, Outcome: b, Resolution: res, TTL: t.cfg.KeyTTL}, nil
}

// letGo ends the fence's hold on an action found not applied, once the
// claim meant to go on in its place is answered: the claim closed it, or
// it is given back as found (approved for one more attempt).
func (c *call) letGo(res storekit.ClaimResult, err error) {
	h := c.held
	if h == nil {
		return
	}
	c.held = nil
	if err == nil && res.Claimed && res.Record.Replaces == h.rec.Key {
		h.end()
		return
	}
	if ferr := h.notApplied(c.ctx, &Resolution{Verdict: "not applied", By: "fence"}); ferr != nil && !errors.Is(ferr, storekit.ErrFenced) {
		c.t.cfg.logger.Warn("retrysafe: an earlier action found not applied could not be recorded so", "ref", h.rec.Key, "err", ferr)
	}
}

// replaced answers a call whose action was closed as replaced by another
// (and that one perhaps by another still: the chain is followed to its
// end). What went on in its place was done, or runs, or is unknown: the
// call is told so — done means done once, for good, in this scope.
// Otherwise, when that one was not applied (approved for one more attempt,
// refused, or given back), the action may be done now, as any new write of
// the scope might, in its place. takeBack is false when the claim that met
// the record already tried that.
func (c *call) replaced(rec Record, takeBack bool) outcome {
	cfg := c.t.cfg
	c.replayed(rec.State)
	last, free, err := c.t.inPlaceOf(c.ctx, rec)
	if err != nil {
		return c.storeFailed(err)
	}
	now := cfg.Now()
	a := answer{reason: reasonReplaced, attempts: rec.Attempts, other: &last, result: c.t.storedResult(last), now: now}
	if !takeBack || !free {
		return c.answer(claimSettled, a)
	}
	rep, err := c.replacing(last, 0, nil)
	if err != nil {
		return c.storeFailed(err)
	}
	c.ans, c.replace = a, rep
	return slotApproved
}

// unclaim gives back a claim whose answer was lost (the store's error came
// after it committed): nothing ran, so the key must not stay held until its
// lease lapses and then count as an unknown attempt. The record is the
// call's own if its owner is this claim's. If it cannot be read, the lease
// lapses: unknown, never free. It returns the key's record as it read it,
// if that is another call's (found).
func (c *call) unclaim() (rec Record, found bool) {
	ctx, cancel := c.outcomeCtx()
	defer cancel()
	rec, err := c.t.cfg.Store.Get(ctx, c.ref)
	if err != nil {
		return Record{}, false
	}
	if rec.State != Pending || rec.Owner != c.owner {
		return rec, true
	}
	c.token, c.claimed = rec.Token, rec
	switch {
	case rec.Attempts > 0:
		// A takeover, or an approved retry: an earlier attempt may have
		// applied the action, and this claim checked nothing. Back
		// unknown, awaiting reconciliation — never approved here (an
		// approval this claim spent is given again by a check or a
		// person, who looks first). So also for an action that went on
		// in another's place: a takeover keeps what it replaced.
		err = c.t.writeOutcome(c.ctx, storekit.FinishRequest{Key: c.ref, Token: rec.Token, State: Unknown, Attempts: rec.Attempts,
			Outcome: rec.Outcome, HeldUntil: rec.LeaseExpiry}, nil)
	case rec.Replaces != "":
		// A write in another's place that never ran: back approved for
		// one more attempt, holding the slot as the one it replaced did.
		err = c.t.writeOutcome(c.ctx, storekit.FinishRequest{Key: c.ref, Token: rec.Token, State: Unknown, Attempts: rec.Attempts,
			Outcome: rec.Outcome, RetryApproved: true}, nil)
	default:
		err = c.t.cfg.Store.Release(ctx, c.ref, rec.Token)
	}
	if err != nil {
		c.t.cfg.logger.Warn("retrysafe: a claim whose answer was lost could not be given back; its lease will lapse", "ref", c.ref, "err", err)
	}
	return Record{}, false
}

// readInstead answers a claim the store could not make from rec, the
// key's record as read after it (found), where the rules decide without
// a write (storekit.DecideClaim: a settled action replayed, a live
// holder, another principal's, tool's or input's record — as a store's
// plain read does): an earlier call may have done the action, and the
// call says what became of it, not that nothing was done. Anything that
// would write — a claim, a takeover, a notice told — is the store's to
// decide: not ok, and the call answers store_unavailable (I4).
func (c *call) readInstead(req storekit.ClaimRequest, rec Record, found bool) (storekit.ClaimResult, bool) {
	if !found {
		return storekit.ClaimResult{}, false
	}
	req.Now = c.t.cfg.Now()
	d, err := storekit.DecideClaim(&rec, nil, req, func() (uint64, error) { return 0, errWouldWrite })
	if err != nil || d.Write || len(d.Occupants) > 0 || d.Result.Claimed || d.Result.Blocked != nil {
		return storekit.ClaimResult{}, false
	}
	return d.Result, true
}

// errWouldWrite stops a decision made from a read that would write.
var errWouldWrite = errors.New("the decision would write")

// begin starts holding the key the call's claim was granted.
func (c *call) begin(res storekit.ClaimResult) {
	if h := c.t.cfg.Hooks.Claimed; h != nil {
		h(c.ctx, ClaimedEvent{Tool: c.t.name, RequestRef: c.ref, TookOver: res.TookOver, Attempts: res.Record.Attempts})
	}
	c.token, c.claimed, c.attempt = res.Record.Token, res.Record, res.Record.Attempts
	c.leaseUntil, c.expired = res.Record.LeaseExpiry, res.Expired
	if res.TookOver {
		c.effect = effectMaybe
		c.heldUntil = inFlightUntil(res)
		c.lastSent = c.heldUntil
	}
	c.work, c.stopWork = context.WithCancelCause(c.ctx)
	c.t.flights.begin(c)
}

// end ends what the call holds: its flight, and a hold it never used.
func (c *call) end() {
	if c.held != nil {
		c.letGo(storekit.ClaimResult{}, errors.New("the call ended"))
	}
	if c.stopWork != nil {
		c.t.flights.end(c)
		c.stopWork(nil)
	}
}

// wait waits for the holder of the key or of the slot the last claim met,
// bounded by WaitTimeout.
//
// A wait is measured on the process's own clock, not Options.Now: it is
// how long this call keeps its caller waiting.
func (c *call) wait() outcome {
	now := time.Now()
	if c.waitEnd.IsZero() {
		c.waited, c.waitEnd, c.poll = now, now.Add(c.t.cfg.WaitTimeout), 2*time.Millisecond
	}
	if !now.Before(c.waitEnd) {
		return waitOver // answered as the claim that waits said
	}
	if r := c.ans.reason; r == reasonInProgress || r == reasonEarlierRunning {
		// A holder that stopped renewing its hold will not end it within
		// the wait: answer at once, saying when it ends.
		at := c.t.cfg.Now()
		if until, ok := c.t.cfg.stalled(&c.other, at); ok && until.Sub(at) > c.waitEnd.Sub(now) {
			c.ans.checkAt, c.ans.now = until, at
			return waitOver
		}
	}
	d := min(c.waitEnd.Sub(now), c.other.LeaseExpiry.Sub(c.t.cfg.Now()))
	if c.waitFor(d) != nil {
		return waitOver
	}
	return waited
}

// waitForHolderHere waits, before the call's first claim, for a call of
// this process that holds the same key for the same input, as a claim
// that finds its record held waits (WaitTimeout, the same wait): the call
// then meets what that action became in the store, rather than race its
// holder there. Raced, a store that failed the second claim (a scope lock
// held by a paused replica, a timeout) answered store_unavailable, "not
// run", just as the holder in the same process applied the action.
func (c *call) waitForHolderHere() {
	if !c.waitEnd.IsZero() {
		return // waited already: the call's wait is one
	}
	done := c.t.flights.doneIfAlike(c.ref, c.req.Fingerprint, c.t.cfg.Now())
	if done == nil {
		return
	}
	now := time.Now()
	c.waited, c.waitEnd, c.poll = now, now.Add(c.t.cfg.WaitTimeout), 2*time.Millisecond
	timer := time.NewTimer(c.t.cfg.WaitTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-c.ctx.Done():
	}
}

// stalled reports whether the pending record rec is held by a call that
// has missed a renewal of its lease, at now, and when its hold ends
// (ClockSkew after its lease). A holder renews every third of its lease
// (Record.Updated): one not renewed for half of it has died or hangs, and
// nothing changes until its lease lapses — no takeover before then, for
// a paused holder may still act.
func (c *config) stalled(rec *Record, now time.Time) (time.Time, bool) {
	lease := rec.LeaseExpiry.Sub(rec.Updated)
	if rec.State != Pending || lease <= 0 || now.Before(c.stallsAt(rec.Updated, lease)) || !now.Before(rec.LeaseExpiry) {
		return time.Time{}, false
	}
	return rec.LeaseExpiry.Add(c.ClockSkew), true
}

// stallsAt is when a pending record last written at updated, with a lease
// of lease, reads as held by a call that stopped renewing it.
func (c *config) stallsAt(updated time.Time, lease time.Duration) time.Time {
	return updated.Add(lease/2 + c.ClockSkew)
}

// waitFor waits until the holder of c.other in this process ends, or for
// one poll interval (growing to 50ms) when the holder is elsewhere, at most
// d. A lease that has expired without the store granting the claim is
// polled too, never claimed again in a tight loop.
func (c *call) waitFor(d time.Duration) error {
	done := c.t.flights.done(c.other.Key)
	if d <= 0 {
		d, done = c.poll, nil
	}
	if done == nil {
		d = min(d, c.poll)
		c.poll = min(c.poll*2, 50*time.Millisecond)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	return nil
}

// attemptOnce runs the tool once, if the call may.
func (c *call) attemptOnce() outcome {
	cfg := c.t.cfg
	if cause := context.Cause(c.work); errors.Is(cause, ErrLeaseLost) {
		// Another call may take the key over: nothing more is run.
		return c.stopped(leaseLost, cause, reasonLeaseLost)
	}
	if c.effect.mayApply() && cfg.Class == Keyed && c.facts().forgotten {
		// The call's own retries reached the destination's key lifetime:
		// the next one could act twice. Ask, or stop.
		c.cause, c.final = errKeyForgotten, Unknown
		c.ans = answer{reason: reasonKeyForgotten, attempts: c.attempt, created: c.claimed.Created}
		return keyForgotten
	}
	if c.tries > 0 && cfg.Class != ReadOnly {
		now := cfg.Now()
		until := now.Add(cfg.Lease)
		if err := cfg.Store.Renew(c.ctx, storekit.RenewRequest{Key: c.ref, Token: c.token, Until: until, Now: now}); err != nil {
			return c.stopped(leaseLost, fmt.Errorf("renewing the lease before attempt %d: %w", c.attempt+1, err), reasonLeaseLost)
		}
		c.fl.keep.extended(until)
	}
	c.tries++
	c.attempt++
	out, err := c.run1(c.attempt)
	if err == nil {
		c.final = Succeeded
		c.ans = answer{reason: reasonSucceeded, attempts: c.attempt, result: out}
		if at := int64(c.attempt); c.replayedAt.Load() == at && (c.claimed.Attempts > 0 || c.expired || c.replayedAnother.Load() == at) {
			// The record proves that an earlier call attempted this action (or
			// did it, and its record expired),
			// and that attempt may have been the first the destination saw:
			// the replay is of that call's request. Otherwise the replay
			// is of this call's own request (a resend it did not see, by
			// a transport or a proxy): its own success.
			c.ans.reason = reasonDestinationReplayed
		}
		return attemptSucceeded
	}
	c.cause = err
	switch envelope.Classify(err) {
	case envelope.Definite:
		if c.effect.mayApply() {
			// A refusal of this attempt says nothing about an earlier one
			// that may have applied: the outcome stays unknown.
			c.cause = fmt.Errorf("this attempt was refused (%w), but an earlier one may have applied", err)
			c.final, c.ans = Unknown, answer{reason: reasonUnknown, attempts: c.attempt, err: c.cause}
			return attemptRefused
		}
		code := envelope.Code(err)
		if code == "" {
			code = envelope.CodeRejected
		}
		if errors.Is(err, ErrAwaitsInput) {
			c.ans = answer{reason: reasonAwaitsInput, attempts: c.attempt, err: err, code: code}
			return attemptAsks
		}
		c.final, c.ans = Failed, answer{reason: reasonRefused, attempts: c.attempt, err: err, code: code}
		return attemptRefused
	case envelope.Unknown:
		if cfg.Class != ReadOnly {
			c.effect = effectMaybe
			c.final, c.ans = Unknown, answer{reason: reasonUnknown, attempts: c.attempt, err: err}
			return attemptMaybe
		}
	}
	return c.stopped(attemptTransient, err, reasonUnavailable)
}

// stopped sets what the call answers if it stops now after err: unknown if
// the action may have been applied, else r (nothing was).
func (c *call) stopped(o outcome, err error, r reason) outcome {
	c.cause = err
	if c.effect.mayApply() {
		c.final, c.ans = Unknown, answer{reason: reasonUnknown, attempts: c.attempt, err: err}
	} else {
		c.ans = answer{reason: r, attempts: c.attempt, err: err}
	}
	return o
}

// run1 runs the tool once with the call's information on its context.
// keyDeadline is when the destination may forget a Keyed action's key, on
// the machine's clock (as a context's deadline is); zero for another
// class, or a destination that keeps keys forever.
func (c *call) keyDeadline() time.Time {
	cfg := c.t.cfg
	if d := cfg.keyDeadline(c.claimed.Created); cfg.Class == Keyed && !d.IsZero() {
		return time.Now().Add(d.Sub(cfg.Now()))
	}
	return time.Time{}
}

func (c *call) run1(n int) (json.RawMessage, error) {
	cfg := c.t.cfg
	var ctx context.Context
	if c.first.Context == nil {
		c.first = attemptCtx{c.work, c, n}
		ctx = &c.first
	} else {
		// A goroutine of an earlier attempt may still read its context.
		ctx = &attemptCtx{c.work, c, n}
	}
	if cfg.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.AttemptTimeout)
		defer cancel()
	}
	if d := c.keyDeadline(); !d.IsZero() {
		// A request that reached the destination after it forgot the key
		// could act twice: the attempt stops before then.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, d, errKeyDeadline)
		defer cancel()
	}
	start := cfg.Now()
	c.lastSent = start
	out, err := c.t.run(ctx, c.args)
	// The attempt may have sent its request at any moment until it
	// returned: "sent more than N minutes ago" counts from here.
	end := cfg.Now()
	c.lastSent = later(start, end)
	if h := cfg.Hooks.Attempt; h != nil {
		h(c.ctx, AttemptEvent{Tool: c.t.name, RequestRef: c.ref, Attempt: n, Err: err,
			Class: envelope.Classify(err), Duration: end.Sub(start)})
	}
	return out, err
}

// backOff waits before the next attempt, if the retry policy allows one.
func (c *call) backOff() outcome {
	cfg := c.t.cfg
	if c.policy == nil {
		c.policy = newBackOff(cfg.Retry, cfg.Now)
	}
	wait := c.policy.NextBackOff()
	if wait < 0 {
		return noMoreAttempts
	}
	if h := cfg.Hooks.Retry; h != nil {
		h(c.ctx, RetryEvent{Tool: c.t.name, RequestRef: c.ref, Attempt: c.attempt, Err: c.cause, Wait: wait})
	}
	if sleep(c.work, wait) != nil {
		return noMoreAttempts
	}
	return backedOff
}

// check asks the destination what became of the call's action: before an
// attempt (the key was taken over, or a keyed key may be forgotten), or
// after one whose outcome is unknown.
func (c *call) check() outcome {
	cfg := c.t.cfg
	info := CallInfo{RequestRef: c.ref, Scope: c.scope, Token: c.token, Codec: cfg.codec}
	req := reconcile.Request{Ref: c.ref, Attempts: c.attempt, LastSent: c.lastSent, Input: c.input}
	// The takeover rule holds for the call's own attempts too: a request
	// sent until lastSent may still land (AttemptTimeout, ClockSkew).
	ans := c.t.check(withCallInfo(c.work, info), cfg.Reconciler, req, later(c.heldUntil, c.lastSent))
	c.t.reported(c.ctx, ans, c.ref, "reconciler")
	switch ans.Verdict {
	case reconcile.Applied:
		c.final, c.ans = Succeeded, answer{reason: reasonReconciled, attempts: c.attempt, result: ans.Result}
		return checkApplied
	case reconcile.NotApplied:
		switch {
		case c.effect == effectCommitted:
			// The store knows an effect committed: the answer is wrong,
			// and the outcome stays unknown.
		case ans.Fenced:
			c.effect = effectNone // proven: nothing this call sent has landed or can land
			return c.stopped(checkNotApplied, c.cause, reasonUnavailable)
		default:
			c.effect = effectNotFound
			return c.stopped(checkNotApplied, c.cause, reasonUnavailable)
		}
	}
	c.cause = fmt.Errorf("%w; the destination's answer: %s", c.cause, describe(ans))
	c.final, c.ans = Unknown, answer{reason: reasonUnknown, attempts: c.attempt, err: c.cause}
	if ans.Verdict == reconcile.NotApplied {
		return checkNotApplied
	}
	return checkNoAnswer
}

// record records the call's outcome and answers with it. The outcome is
// recorded on a context that survives the caller's cancellation: an effect
// that happened must not go unrecorded because the caller stopped listening.
func (c *call) record() outcome {
	cfg := c.t.cfg
	env := c.t.answerFor(c.ref, c.ans)
	if h := cfg.Hooks.Unknown; h != nil && c.final == Unknown {
		e := UnknownEvent{Tool: c.t.name, RequestRef: c.ref, Attempts: env.Attempts}
		if env.Error != nil {
			e.Reason = env.Error.Message
		}
		h(c.ctx, e)
	}
	req := storekit.FinishRequest{Key: c.ref, Token: c.token, State: c.final, Attempts: env.Attempts}
	switch c.final {
	case Unknown:
		req.HeldUntil = later(c.heldUntil, c.lastSent)
	case Succeeded:
		switch {
		case c.fl.keep.stalled(cfg.Now()):
			// The record read as held by a call that stopped answering
			// (paused, or cut off from the store): the scope's other calls
			// may have been told so, and this call's own caller may have
			// gone on without its answer. Nobody is told by it.
			req.NoticeUntil = cfg.noticeUntil(false)
		case c.claimed.TakenOver || c.claimed.Attempts > 0 || c.claimed.Replaces != "":
			// The action's outcome was unknown before this call (taken
			// over, or a retry approved after it), or this call went on in
			// place of such an action: the model may have sent a copy in
			// other words, or the other one again, in the same turn.
			req.NoticeUntil = cfg.noticeUntil(true)
		}
	}
	err := c.t.writeOutcome(c.ctx, req, &env)
	switch {
	case err == nil:
	case c.final == Failed && errors.Is(err, storekit.ErrEffectApplied):
		c.effect = effectCommitted
		c.cause = fmt.Errorf("the tool reported %w after its effect was recorded", c.cause)
		c.final, c.ans = Unknown, answer{reason: reasonUnknown, attempts: c.attempt, err: c.cause}
		return effectFound
	case errors.Is(err, storekit.ErrFenced) && c.final != Succeeded:
		// Another holder took the action over while this call ran (a
		// pause past its lease): what this call saw is not the action's
		// outcome — the other holder may have applied it. Claim again, and
		// answer with what the action became.
		cfg.logger.Warn("retrysafe: outcome not recorded: another call holds the action now", "ref", c.ref, "state", c.final, "err", err)
		return c.lostHold()
	default:
		cfg.logger.Warn("retrysafe: outcome not recorded", "ref", c.ref, "state", c.final, "err", err)
		if errors.Is(err, storekit.ErrFenced) {
			env.Note = "Another call took this action over while it ran; this call's attempt applied it."
		}
		// The envelope stays true to what happened. The record stays
		// pending, its lease expires, and the next call treats it as
		// unknown: never as free.
	}
	c.env = env
	return recorded
}

// lostHold ends the call's hold on a key another call took over, so that
// the call can claim it again and answer with what the action became.
func (c *call) lostHold() outcome {
	c.t.flights.end(c)
	c.stopWork(nil)
	c.stopWork, c.work = nil, c.ctx
	c.effect, c.token, c.claimed, c.heldUntil, c.lastSent = effectNone, 0, Record{}, time.Time{}, time.Time{}
	return holdLost
}

// giveBack returns the call's key when nothing was applied. A new action's
// key is released, so that a later call tries afresh. A record that
// existed before the call (a retry approved by a person or found not
// applied), or one that went on in place of such an action, is written
// back unknown and approved for a retry, with the attempts counted:
// released, its count would start again at 1, an approval bound to an older
// outcome would match anew, and the attempt a replacement took would be
// lost to the scope (its next new write would run as if nothing were
// owed, and the one after it beside it). A record whose
// action may have been applied (a keyed key the destination may have
// forgotten) is written back as it was: unknown. If the write fails the
// lease expires and the record is then treated as unknown: safe, if
// cautious. A store that refuses because an effect committed under the key
// says so (storekit.ErrEffectApplied).
func (c *call) giveBack() outcome {
	c.t.flights.quiet(c) // a renewal of a given-back key would only fail
	held := later(c.heldUntil, c.lastSent)
	var err error
	switch {
	case c.effect.mayApply():
		err = c.t.writeOutcome(c.ctx, storekit.FinishRequest{Key: c.ref, Token: c.token, State: Unknown, Attempts: c.claimed.Attempts,
			Outcome: c.claimed.Outcome, HeldUntil: held}, nil)
	case c.claimed.Attempts == 0 && c.claimed.Replaces == "":
		ctx, cancel := c.outcomeCtx()
		err = c.t.cfg.Store.Release(ctx, c.ref, c.token)
		cancel()
	default:
		err = c.t.writeOutcome(c.ctx, storekit.FinishRequest{Key: c.ref, Token: c.token, State: Unknown, Attempts: c.attempt,
			Outcome: c.claimed.Outcome, RetryApproved: true, HeldUntil: held}, nil)
	}
	if errors.Is(err, storekit.ErrEffectApplied) {
		c.effect = effectCommitted
		c.cause = fmt.Errorf("the tool reported %w after its effect was recorded", c.cause)
		c.final, c.ans = Unknown, answer{reason: reasonUnknown, attempts: c.attempt, err: c.cause}
		return effectFound
	}
	if errors.Is(err, storekit.ErrFenced) {
		// Taken over: nothing of this call applied the action, but the
		// other holder may have.
		return c.lostHold()
	}
	if err != nil {
		c.t.cfg.logger.Warn("retrysafe: could not give back a key whose tool did not apply the effect", "ref", c.ref, "err", err)
	}
	return givenBack
}

// done builds the answer of a call that ends without recording an
// outcome, and tells the hooks how it waited or was held.
func (c *call) done() {
	cfg := c.t.cfg
	if c.env.Version == 0 {
		c.env = c.t.answerFor(c.ref, c.ans)
	}
	if h := cfg.Hooks.Waited; h != nil && !c.waited.IsZero() {
		h(c.ctx, WaitedEvent{Tool: c.t.name, RequestRef: c.ref, Duration: time.Since(c.waited),
			GaveUp: c.moves > 0 && c.path[min(c.moves, maxPath)-1] == phaseWait})
	}
	h := cfg.Hooks.Fenced
	switch {
	case h == nil, c.ans.replayed:
		// A replayed answer (a call the notice held back, asked for
		// again) is the Replayed hook's.
	case c.ans.reason == reasonEarlierApplied && c.ans.other == nil:
		// Held back by a mark that names no action kept.
		h(c.ctx, FencedEvent{Tool: c.t.name, RequestRef: c.ref, EarlierState: envelope.ActionSucceeded})
	case c.env.Earlier != nil && c.env.Earlier.RequestRef != c.ref && c.ans.other != nil:
		switch c.ans.reason {
		case reasonEarlierRunning, reasonEarlierUnknown, reasonEarlierApplied, reasonEarlierDone:
			h(c.ctx, FencedEvent{Tool: c.t.name, RequestRef: c.ref, Earlier: c.env.Earlier.RequestRef, EarlierState: c.env.Earlier.State})
		}
	}
}

// answer sets what the call answers, and returns o.
func (c *call) answer(o outcome, a answer) outcome {
	if a.reason == reasonEarlierUnknown && a.other != nil {
		a.resends = c.resendSettles(a.other)
	}
	c.ans = a
	return o
}

// resendSettles reports whether calling the tool again with the exact
// input of o, an earlier action of the scope, settles o: the tool is
// keyed, the call would meet o's reference (o is of this call's session,
// and was made under the tool's definition), and the destination still
// keeps it.
func (c *call) resendSettles(o *Record) bool {
	cfg := c.t.cfg
	return cfg.Class == Keyed && o.Session == c.session && !cfg.otherDefinition(o) && !cfg.keyForgotten(o.Created)
}

// storeFailed answers a call whose store could not be used: nothing ran.
func (c *call) storeFailed(err error) outcome {
	return c.answer(storeFailed, answer{reason: reasonStoreUnavailable, err: err})
}

// replayed tells the Replayed hook that the call answers with a recorded
// outcome.
func (c *call) replayed(s State) {
	if h := c.t.cfg.Hooks.Replayed; h != nil {
		h(c.ctx, ReplayedEvent{Tool: c.t.name, RequestRef: c.ref, State: s})
	}
}

// replay is the answer of a settled action: its recorded outcome; the tool
// does not run. An outcome that cannot be read does not change what the
// record's state says: a succeeded action is answered as a success without
// its result. An action replaced by another is answered with what became of
// that one.
func (c *call) replay(rec Record) answer {
	c.replayed(rec.State)
	raw, err := c.t.cfg.codec.Decode(c.ref, rec.Outcome)
	var env envelope.Envelope
	if err == nil {
		if env, err = envelope.Parse(raw); err != nil {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	if err == nil && env.Status != statusOf(rec.State) {
		err = fmt.Errorf("%w: a %v record holds a %s outcome", ErrCorrupt, rec.State, env.Status)
	}
	if err != nil {
		c.t.cfg.logger.Warn("retrysafe: stored outcome unreadable", "ref", c.ref, "state", rec.State, "err", err)
		return answer{reason: reasonReplayUnreadable, attempts: rec.Attempts, state: rec.State, err: err}
	}
	return answer{reason: reasonReplay, replay: env}
}

// statusOf is the envelope status of a final record state.
func statusOf(s State) envelope.Status {
	if s == Succeeded {
		return envelope.Success
	}
	return envelope.DefiniteFailure
}

// writeOutcome records the final state of the record req.Key held by
// req.Token, with env encoded through the codec as its outcome (nil keeps
// req.Outcome). It writes on a context that outlives the caller's
// cancellation, bounded by StoreTimeout unless the store is local: an effect
// that happened must not go unrecorded because the caller stopped listening.
func (t *Tool) writeOutcome(ctx context.Context, req storekit.FinishRequest, env *envelope.Envelope) error {
	cfg := t.cfg
	if env != nil {
		b, err := env.Marshal()
		if err != nil {
			return err
		}
		if req.Outcome, err = cfg.codec.Encode(req.Key, b); err != nil {
			return fmt.Errorf("encoding the outcome: %w", err)
		}
	}
	req.Now, req.TTL = cfg.Now(), cfg.KeyTTL
	ctx = context.WithoutCancel(ctx)
	if cfg.localStore {
		return cfg.Store.Finish(ctx, req)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StoreTimeout)
	defer cancel()
	return cfg.Store.Finish(ctx, req)
}

// outcomeCtx is a context for recording an outcome: not cancelled with the
// caller's, bounded by StoreTimeout.
func (c *call) outcomeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(c.ctx), c.t.cfg.StoreTimeout)
}

// noticeUntil is when a notice put now ends: the scope's other new writes
// are told of an action just found done until then (zero: no notice). A
// notice whose settlement told the model (told) ends noticeHold later; one
// that told nobody lasts until a call is told of it, at most
// NoticeBackstop.
func (c *config) noticeUntil(told bool) time.Time {
	switch {
	case c.NoticeHold < 0 || c.Fence == FenceOff:
		return time.Time{}
	case told:
		return c.Now().Add(c.noticeHold())
	}
	return c.Now().Add(max(c.NoticeBackstop, c.noticeHold()))
}

// unkeyed reports whether the tool's destination does not dedupe by the
// key (storekit.ClaimRequest.Unkeyed): only the claim keeps its actions
// from running twice, so every claim of them — a call's, a person's, a
// settlement's — must survive a failover, and a store that went back in
// time trusts neither a missing record nor the times of the one it kept.
func (c *config) unkeyed() bool {
	return c.Class == AtMostOnce || c.Class == Reconcilable
}

// notices reports whether the tool's actions found done after an unknown
// outcome keep a notice (noticeUntil), and the calls it holds back are
// kept held back (ClaimRequest.NoticeHold).
func (c *config) notices() bool {
	return c.NoticeHold > 0 && c.Fence != FenceOff
}

// noticeHold is how long a notice is kept once its model was told, on
// this process's clock: NoticeHold plus ClockSkew, so that a replica whose
// clock is that far ahead still holds it for NoticeHold.
func (c *config) noticeHold() time.Duration {
	return c.NoticeHold + c.ClockSkew
}

// inFlightUntil is, for a claim that took a record over, the latest time an
// earlier attempt of the action may have been sent or still be in flight:
// the end of a lapsed lease, or the last attempt's start, kept on the
// unknown record as its LeaseExpiry; for records that kept neither, when
// the record last changed.
func inFlightUntil(res storekit.ClaimResult) time.Time {
	if !res.HeldUntil.IsZero() {
		return res.HeldUntil
	}
	return res.Since
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func sooner(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
