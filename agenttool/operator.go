package agenttool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// Operator lists and settles actions whose outcome is unknown: for people
// (an admin screen, a CLI) and for the [Operator.RunSweeper] loop that asks
// destinations on its own. It knows the guarded tools that write to its store,
// for their reconcilers, codecs and lifetimes.
//
// An Operator made by [NewOperator] sees every principal's records; one made
// by [Operator.ForPrincipal] sees and settles only that principal's, and
// answers ErrNotFound for the others' ([Operator.ForTool] likewise for one
// tool). Settling a record that a live check or call holds waits for it, up
// to the tool's WaitTimeout, then answers ErrBusy. An Operator is safe for
// concurrent use.
type Operator struct {
	store     Store
	tools     map[string]*Tool
	principal *Digest
	tool      string // only this tool's records, if not ""
	// none is set when two limits exclude each other (ForPrincipal of
	// another principal on an operator limited to one): it sees nothing.
	none bool
	// anyTool, if not nil, settles records of tools not given, with these
	// options (ForAnyTool).
	anyTool *Options
	// now is the first tool's clock (nil: time.Now).
	now func() time.Time
}

// NewOperator returns an operator for the given tools, which must all use
// store (and one DigestKey). Records of tools not given are listed but
// cannot be settled.
func NewOperator(store Store, tools ...*Tool) (*Operator, error) {
	o := &Operator{store: store, tools: make(map[string]*Tool, len(tools))}
	if len(tools) > 0 {
		o.now = tools[0].cfg.Now
	}
	for _, t := range tools {
		if t.cfg.Store != store {
			return nil, fmt.Errorf("agenttool: operator: tool %q uses another store: %w", t.name, ErrInvalidOptions)
		}
		if !bytes.Equal(t.cfg.digestKey, tools[0].cfg.digestKey) {
			return nil, fmt.Errorf("agenttool: operator: tools %q and %q digest principals with different keys: %w", tools[0].name, t.name, ErrInvalidOptions)
		}
		if _, dup := o.tools[t.name]; dup {
			return nil, fmt.Errorf("agenttool: operator: two tools are named %q: %w", t.name, ErrInvalidOptions)
		}
		o.tools[t.name] = t
	}
	return o, nil
}

// ForPrincipal returns an operator limited to one principal's records. A
// limit narrows, never widens: on an operator already limited to another
// principal, it returns one that sees nothing.
func (o *Operator) ForPrincipal(principal string) *Operator {
	c := &config{}
	for _, t := range o.tools {
		c = t.cfg // they share one DigestKey
		break
	}
	d := c.principalDigest(principal)
	limited := *o
	limited.none = o.none || (o.principal != nil && *o.principal != d)
	limited.principal = &d
	return &limited
}

// ForTool returns an operator limited to one tool's records. A limit
// narrows, never widens: on an operator already limited to another tool,
// it returns one that sees nothing.
func (o *Operator) ForTool(name string) *Operator {
	limited := *o
	limited.none = o.none || (o.tool != "" && o.tool != name)
	limited.tool = name
	return &limited
}

// ForAnyTool returns an operator that also settles records of tools it was
// not given, as a tool with the default Codec and the given key lifetime (0
// means 24h) would, with no reconciler and no Compensate: for a standalone
// operator program (cmd/retrysafe) when the application's tools use the
// default Codec. Give the operator every tool whose Codec redacts or
// encrypts, or it would store their results and notes as they are.
func (o *Operator) ForAnyTool(keyTTL time.Duration) *Operator {
	any := *o
	any.anyTool = &Options{Store: o.store, Class: AtMostOnce, KeyTTL: keyTTL}
	return &any
}

// toolOf returns the tool that settles the records of name: the one given,
// or a stand-in made by ForAnyTool's options.
func (o *Operator) toolOf(name string) (*Tool, error) {
	if t, ok := o.tools[name]; ok {
		return t, nil
	}
	if o.anyTool == nil {
		return nil, fmt.Errorf("agenttool: tool %q was not given to the operator: %w", name, ErrInvalidRequest)
	}
	cfg, err := newConfig(name, *o.anyTool)
	if err != nil {
		return nil, err
	}
	return &Tool{name: name, cfg: cfg}, nil
}

// Outcome returns the outcome recorded with rec (a record from Show or
// Unknown), decoded with its tool's codec: for a settled record, the
// envelope its calls replay; for an unknown one, the unknown_outcome whose
// error says what went wrong and what the destination last answered. A
// record with no outcome yet (pending, new) answers ErrNotFound.
func (o *Operator) Outcome(rec Record) (envelope.Envelope, error) {
	if len(rec.Outcome) == 0 {
		return envelope.Envelope{}, fmt.Errorf("agenttool: %s has no outcome yet: %w", rec.Key, ErrNotFound)
	}
	t, err := o.toolOf(rec.Tool)
	if err != nil {
		t = &Tool{name: rec.Tool, cfg: &config{codec: plainCodec{}}}
	}
	raw, err := t.cfg.codec.Decode(rec.Key, rec.Outcome)
	if err != nil {
		return envelope.Envelope{}, fmt.Errorf("agenttool: decoding the outcome of %s: %w: %w", rec.Key, ErrCorrupt, err)
	}
	env, err := envelope.Parse(raw)
	if err != nil {
		return envelope.Envelope{}, fmt.Errorf("agenttool: the outcome of %s: %w: %w", rec.Key, ErrCorrupt, err)
	}
	return env, nil
}

// Stats counts the operator's records by tool, state and approval, with
// the store's [storekit.Counter] (every store of this module has one). It
// reads every record: it is for people, not for calls.
func (o *Operator) Stats(ctx context.Context) ([]storekit.Count, error) {
	if o.none {
		return nil, nil
	}
	c, ok := o.store.(storekit.Counter)
	if !ok {
		return nil, fmt.Errorf("agenttool: the store (%T) cannot count its records: %w", o.store, errors.ErrUnsupported)
	}
	counts, err := c.Count(ctx, storekit.CountRequest{Principal: o.principal})
	if err != nil || o.tool == "" {
		return counts, err
	}
	mine := counts[:0]
	for _, n := range counts {
		if n.Tool == o.tool {
			mine = append(mine, n)
		}
	}
	return mine, nil
}

// Unknown lists the records awaiting reconciliation, ordered by reference,
// starting after the reference after ("" for the first page). limit 0 means
// 100. Records the store cannot read are skipped and reported: the readable
// ones come back with an error naming the others ([CorruptKeys]).
// Resolutions and labels are decoded with their tools' codecs. A pending
// record whose holder's lease lapsed counts that holder's attempt in
// Attempts, as the takeover that settles it will.
func (o *Operator) Unknown(ctx context.Context, after string, limit int) ([]Record, error) {
	if o.none {
		return nil, nil
	}
	recs, err := o.store.ListUnknown(ctx, storekit.ListRequest{Principal: o.principal, Tool: o.tool, After: after, Limit: limit, Now: o.clock()})
	for i := range recs {
		o.open(&recs[i])
	}
	return recs, err
}

// open decodes a record's resolution and label with its tool's codec, if
// the tool is known. A pending record whose lease has lapsed counts its
// holder's attempt, as the takeover that settles it will.
func (o *Operator) open(r *Record) {
	if r.State == Pending && !o.clock().Before(r.LeaseExpiry) {
		r.Attempts++
	}
	if t, err := o.toolOf(r.Tool); err == nil {
		r.Resolution = t.openResolution(r.Key, r.Resolution)
		r.Label = t.unseal(r.Key, r.Label)
		if r.Input != nil {
			in, err := t.cfg.inputCodec.Decode(r.Key, r.Input)
			if err != nil {
				in = nil // sealed with a key this operator does not have
			}
			r.Input = in // what the action asked for (Options.KeepInput)
		}
	}
}

// Show returns the record of one reference. A record of another principal is
// reported as ErrNotFound.
func (o *Operator) Show(ctx context.Context, ref string) (Record, error) {
	rec, err := o.store.Get(ctx, ref)
	if err != nil {
		return Record{}, err
	}
	if o.none || (o.principal != nil && rec.Principal != *o.principal) || (o.tool != "" && rec.Tool != o.tool) {
		return Record{}, fmt.Errorf("agenttool: %s: %w", ref, ErrNotFound)
	}
	o.open(&rec)
	return rec, nil
}

// ResolveApplied settles an unknown outcome as applied, with the
// destination's result (JSON, or nil): later calls replay it as a success.
// attempts is the Record.Attempts of the outcome the person found applied,
// as Show or Unknown returned it: if another attempt has run since, the
// finding is about an outcome that is no longer the record's, and nothing is
// settled (ErrStale). by says who resolves; why is recorded with it.
func (o *Operator) ResolveApplied(ctx context.Context, ref string, attempts int, result json.RawMessage, by, why string) error {
	if len(result) > 0 && !json.Valid(result) {
		return fmt.Errorf("agenttool: resolving %s: the result is not valid JSON: %w", ref, ErrInvalidRequest)
	}
	h, err := o.hold(ctx, ref, by)
	if err != nil {
		return err
	}
	defer h.end()
	if err := h.about(ctx, "resolving", attempts); err != nil {
		return err
	}
	_, err = h.applied(ctx, result, &Resolution{Verdict: "applied", By: "operator:" + by, Why: why})
	return err
}

// SettleByAnswer settles an unknown outcome by what its destination
// answered of one of its attempts outside a check — a late answer, which
// came after the attempt's deadline (mcptool.SettleLate) — as a check's
// answer settles it. attempts is the Record.Attempts of the attempt the
// answer is about.
//
// Applied settles the action as applied, with the answer's result, if the
// record is unknown and counts that attempt (storekit's
// Record.ProvedApplied): whatever ran or was decided since — another
// attempt whose outcome is unknown, a person's or a check's finding of
// not applied, approving one more attempt that has not run — the action is
// done, and one more attempt would do it again. Not applied settles it
// only if no attempt ran since (else ErrStale), and only once no attempt
// of the action may still land (AttemptTimeout, LateWindow and ClockSkew
// after the last was sent): a refusal of one attempt says nothing of an
// earlier one still in flight. Otherwise, and for any other verdict, the
// record stays unknown. It returns the verdict it settled by (Pending
// when a not-applied answer came too early). by says who settles.
//
// An applied answer about an action closed as replaced (found not
// applied, and another write went on in its place) settles it too: asked
// for again, it would go on in the place of the last of those, and do
// itself a second time. It is settled in that place, holding the scope's
// slot with its notice, as a call of it would claim it, when that one did
// nothing (refused, approved for one more attempt, given back) and no
// other write holds the slot. Otherwise — that one succeeded or its
// outcome is open, or another write holds the slot — it is settled
// applied aside from the scope (storekit's decision for a replaced action
// claimed without a fence scope): asked for again, it answers the
// result; a model of its conversation is told before its next write, as
// it is of any action settled applied. That other action may be this one
// reworded, which nothing in the records tells: SettleByAnswer returns
// Applied with an error wrapping ErrContradicted that names it, and a
// person should look at it before approving it.
//
// An applied answer about an attempt of an action recorded failed (not
// replaced) settles nothing and answers ErrContradicted: a finding of not
// applied was wrong, and the attempt it allowed failed; a person should
// look.
func (o *Operator) SettleByAnswer(ctx context.Context, ref string, attempts int, ans reconcile.Answer, by string) (reconcile.Verdict, error) {
	if len(ans.Result) > 0 && !json.Valid(ans.Result) {
		return reconcile.CantSay, fmt.Errorf("agenttool: settling %s: the result is not valid JSON: %w", ref, ErrInvalidRequest)
	}
	if ans.Verdict == reconcile.Applied {
		return o.settleApplied(ctx, ref, attempts, ans, by)
	}
	h, err := o.hold(ctx, ref, by)
	if err != nil {
		return reconcile.CantSay, err
	}
	defer h.end()
	if err := h.about(ctx, "settling", attempts); err != nil {
		return reconcile.CantSay, err
	}
	ans = h.t.trust(ans, h.heldUntil, h.t.cfg.Now()) // the finding is told now: it was made no later
	if ans.Verdict == reconcile.NotApplied {
		return ans.Verdict, h.notApplied(ctx, &Resolution{Verdict: "not applied", By: by})
	}
	return ans.Verdict, h.stillUnknown(ctx)
}

// settleApplied settles as applied, by ans, an unknown action that ans
// proves applied by one of the attempts its record counts. A record held
// by a live call is waited for, up to the tool's WaitTimeout.
func (o *Operator) settleApplied(ctx context.Context, ref string, attempts int, ans reconcile.Answer, by string) (reconcile.Verdict, error) {
	if by == "" {
		return reconcile.CantSay, fmt.Errorf("agenttool: settling %s: say who settles it: %w", ref, ErrInvalidRequest)
	}
	var deadline time.Time
	poll := 5 * time.Millisecond
	again := 0
	for {
		settled, wait, err := o.settleApplied1(ctx, ref, attempts, ans, by)
		switch {
		case settled:
			return reconcile.Applied, err
		case errors.Is(err, errSettleAgain) && again < 8:
			again++
			continue
		case !errors.Is(err, ErrBusy):
			return reconcile.CantSay, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(wait)
		}
		if !time.Now().Before(deadline) || sleep(ctx, min(poll, time.Until(deadline))) != nil {
			return reconcile.CantSay, err
		}
		poll = min(2*poll, 100*time.Millisecond)
	}
}

// settleApplied1 is one try of settleApplied; settled reports whether it
// settled the action (err then says what a person should look at). A
// call it meets holding the record answers ErrBusy, with how long the
// record's tool waits for one. The claim takes the record over, or takes
// its approval for one more attempt (storekit's decision: a claim of an
// approved record consumes it), and asks for no fence scope: it settles
// the action, it writes nothing (the record keeps the slot it holds), and
// the scope's other unsettled actions hold back new writes, not this.
//
// An action closed as replaced (found not applied, and another went on
// in its place) is not over: asked for again, it goes on in the place of
// the last of those if that one did nothing (refused, approved for one
// more attempt, or given back). An answer that one of its attempts
// applied it settles it so, in that place, as a call of it would claim it
// (storekit's decision for a replaced action asked for again): the last
// one is closed as replaced by it, and it holds the slot settled applied,
// with its notice. When that one did or may have done something, or
// another write holds the slot, the action is claimed without a fence
// scope instead — outside any slot, closing nothing, holding nothing back
// but its own session's new writes while its notice lasts (a record
// beside the slot) — and settled applied there, aside. Either way, the
// writes of the action's conversation that went on in its place, and
// that could still run or be asked for again, are marked first
// (markChain), whoever holds them. Dropped, the answer would let the
// action be done a second time when asked for again. While another write
// holding the slot runs: ErrBusy (the marks set all the same).
func (o *Operator) settleApplied1(ctx context.Context, ref string, attempts int, ans reconcile.Answer, by string) (settled bool, wait time.Duration, err error) {
	rec, err := o.Show(ctx, ref)
	if err != nil {
		return false, 0, err
	}
	t, err := o.toolOf(rec.Tool)
	if err != nil {
		return false, 0, fmt.Errorf("agenttool: settling %s: %w", ref, err)
	}
	cfg := t.cfg
	counted := attempts >= 1 && attempts <= rec.Attempts
	req := storekit.ClaimRequest{
		Key: ref, Tool: rec.Tool, Principal: rec.Principal, Session: rec.Session, Fingerprint: rec.Fingerprint,
		Owner: newOwner(), Now: cfg.Now(), Lease: cfg.Lease, TakeOver: true, KeyTTL: cfg.KeyTTL, Unkeyed: cfg.unkeyed(),
	}
	// aside is the action that went on in the record's place, or holds its
	// scope, when the record is settled aside from the scope; marked, the
	// writes of its conversation in its place, marked.
	var aside *Record
	var marked map[string]bool
	// mark marks, when the record was replaced, the writes of its
	// conversation that went on in its place (markChain) but except —
	// first, while the record still names them: should this process stop
	// before the action is settled, the marks are there, and the answer
	// given again finds the record as it was. Settled in the last one's
	// place, the action closes that one (except), and asked for again it
	// is told the action was done; settled aside, every one is marked.
	chained := false
	mark := func(except string) error {
		if !chained {
			return nil
		}
		m, err := t.markChain(ctx, rec, except)
		if err != nil {
			return fmt.Errorf("agenttool: settling %s: %w", ref, err)
		}
		marked = m
		return nil
	}
	switch {
	case rec.State == Pending && cfg.Now().Before(rec.LeaseExpiry):
		return false, cfg.WaitTimeout, fmt.Errorf("agenttool: settling %s: %w", ref, ErrBusy)
	case rec.State == Failed && counted && rec.ReplacedBy != "" && !rec.Sweepable(cfg.Now()):
		// The last one may still run (its own call, or a sweeper's):
		// it may do something, so the action is settled aside from it.
		last, free, err := t.inPlaceOf(ctx, rec)
		if err != nil {
			return false, 0, err
		}
		chained = true
		// Claimed as the action asked for again is: in its last
		// replacement's place, in the slot it held — or aside, if that
		// one did or may have done something.
		rep, err := t.replacing(last, rec.Key, 0, nil)
		if err != nil {
			return false, 0, err
		}
		req.TakeOver, req.FenceScope, req.Replace = false, rec.FenceScope, rep
		except := last.Key
		if last.State == Failed {
			// Refused before the answer came, it did nothing, and its
			// model heard only that: it is marked as it would be had
			// the refusal come after the answer.
			except = ""
		}
		if !free {
			req.FenceScope, aside, except = storekit.Digest{}, &last, ""
		}
		if err := mark(except); err != nil {
			return false, 0, err
		}
	case rec.State == Failed && counted:
		return false, 0, fmt.Errorf("agenttool: settling %s: attempt %d applied, and the action is recorded failed: %w", ref, attempts, ErrContradicted)
	case rec.State != Unknown && rec.State != Pending:
		return false, 0, fmt.Errorf("agenttool: settling %s: it is %v: %w", ref, rec.State, ErrNotUnknown)
	}
	res, err := cfg.Store.Claim(ctx, req)
	if err == nil && res.Blocked != nil && !(res.Blocked.State == Pending && req.Now.Before(res.Blocked.LeaseExpiry)) {
		// Another write holds the slot the action would go on in: it is
		// settled aside.
		blocker := *res.Blocked
		req.FenceScope, aside = storekit.Digest{}, &blocker
		if err := mark(""); err != nil {
			return false, 0, err
		}
		res, err = cfg.Store.Claim(ctx, req)
	}
	switch {
	case err != nil:
		return false, 0, err
	case res.Blocked != nil:
		// Refused for now, the answer may not be given again: the writes
		// in the action's place are marked all the same, since it was
		// proved applied (the walk back from one names it).
		if err := mark(""); err != nil {
			return false, 0, err
		}
		return false, cfg.WaitTimeout, fmt.Errorf("agenttool: settling %s: %s runs in its place: %w", ref, res.Blocked.Key, ErrBusy)
	case !res.Claimed && res.Record.State == Pending:
		return false, cfg.WaitTimeout, fmt.Errorf("agenttool: settling %s: %w", ref, ErrBusy)
	case !res.Claimed && res.Record.State == Failed && res.Record.Attempts >= attempts && attempts >= 1:
		// Closed (failed, or replaced) between the read and the claim:
		// read it again.
		return false, 0, fmt.Errorf("agenttool: settling %s: %w", ref, errSettleAgain)
	case !res.Claimed:
		return false, 0, fmt.Errorf("agenttool: settling %s: it is %v: %w", ref, res.Record.State, ErrNotUnknown)
	}
	h := t.hold(ctx, rec, res)
	defer h.end()
	approved := res.TookApproval()
	resumed := req.Replace != nil && !res.Expired
	if !res.TookOver && !approved && !resumed {
		// The record expired (or was swept) between the read and the
		// claim: the claim made a new one, which nothing needs.
		h.keep.stop()
		if err := cfg.Store.Release(context.WithoutCancel(ctx), ref, res.Record.Token); err != nil {
			return false, 0, err
		}
		return false, 0, fmt.Errorf("agenttool: settling %s: it expired: %w", ref, ErrNotUnknown)
	}
	was := res.Record
	was.State = Unknown
	if !was.ProvedApplied(attempts) {
		// Give the record back as it was, approved or awaiting
		// reconciliation.
		if err := h.finish(ctx, Unknown, nil, nil, approved); err != nil {
			return false, 0, err
		}
		return false, 0, fmt.Errorf("agenttool: settling %s: the answer is about attempt %d, and the record counts %d: %w", ref, attempts, was.Attempts, ErrStale)
	}
	if _, err := h.applied(ctx, ans.Result, &Resolution{Verdict: "applied", By: by}); err != nil {
		return false, 0, err
	}
	if aside == nil {
		return true, 0, nil
	}
	what := "nothing holds it back: look at it before approving it"
	switch {
	case aside.State == Succeeded:
		what = "it was done too: the user may have had this twice"
	case marked[aside.Key]:
		what = "it waits for its conversation's model to hear of this one before it runs again: look at it before approving it"
	}
	return true, 0, fmt.Errorf("agenttool: settling %s: attempt %d applied; it was replaced, and %s (%v) went on in its place or holds its scope: "+
		"settled applied aside from the scope; %s may be this action reworded, and %s: %w",
		ref, attempts, aside.Key, aside.State, aside.Key, what, ErrContradicted)
}

// markChain marks the writes of rec's conversation that went on in place
// of rec's action, now proved applied — directly, or after others that
// did the same — as standing in for it (storekit.Record.StandsInForApplied):
// each may be that action reworded, the last that may run and every one
// closed as replaced that its model may ask for again. None runs again,
// nor does anything of its conversation in its place, for a call that
// answers a model, before that model is told (earlier_action_applied);
// and people who decide about one are warned for as long as it is open.
// Another conversation's write along the way is not marked (it never saw
// the action), and the walk goes on past it. The mark is the store's
// (storekit.DecideMark): set whoever holds the record — its own call, the
// sweeper, a person — and kept by whatever they write next, so nothing
// here waits for them. The walk stops at except, if it meets it. It
// returns the keys it found marked. A tool whose notices are off
// (NoticeHold negative) marks nothing.
func (t *Tool) markChain(ctx context.Context, rec Record, except string) (map[string]bool, error) {
	cfg := t.cfg
	if cfg.noticeUntil(false).IsZero() {
		return nil, nil
	}
	marked := map[string]bool{}
	key := rec.ReplacedBy
	for range maxChain {
		if key == except {
			return marked, nil
		}
		got, err := cfg.Store.Mark(ctx, storekit.MarkRequest{Key: key, Session: rec.Session, Until: storekit.UntilTold, For: rec.Key, Now: cfg.Now()})
		switch {
		case errors.Is(err, ErrNotFound):
			return marked, nil // swept: asked for again, it is a new action
		case err != nil:
			return nil, fmt.Errorf("marking %s, which went on in its place: %w", key, err)
		}
		if got.Session == rec.Session && got.NoticeUntil.Equal(storekit.UntilTold) && got.StandsFor == rec.Key {
			marked[key] = true
		}
		if got.State != Failed || got.ReplacedBy == "" || got.ReplacedBy == rec.Key {
			return marked, nil
		}
		key = got.ReplacedBy
	}
	return nil, fmt.Errorf("more than %d actions went on one in place of another after %s: settle them by hand: %w", maxChain, rec.Key, ErrContradicted)
}

// errSettleAgain asks settleApplied to read the record again at once.
var errSettleAgain = errors.New("the record changed between its read and its claim")

// inPlaceOf follows the actions that went on in place of rec (closed as
// replaced) to the last, and reports whether rec's action, asked for
// again, goes on in its place: the last did nothing (refused, approved
// for one more attempt, given back or swept — then last is only its key,
// failed), not if it succeeded or its outcome is open (pending, unknown).
func (t *Tool) inPlaceOf(ctx context.Context, rec Record) (last Record, free bool, err error) {
	last = Record{Key: rec.ReplacedBy, State: Failed}
	for range maxChain {
		r, err := t.cfg.Store.Get(ctx, last.Key)
		if errors.Is(err, ErrNotFound) {
			return last, true, nil
		}
		if err != nil {
			return Record{}, false, fmt.Errorf("reading %s, which went on in place of %s: %w", last.Key, rec.Key, err)
		}
		if r.State != Failed || r.ReplacedBy == "" {
			open := r.State == Pending || (r.State == Unknown && !r.RetryApproved)
			return r, r.State != Succeeded && !open, nil
		}
		last = Record{Key: r.ReplacedBy, State: Failed}
	}
	return Record{}, false, fmt.Errorf("more than %d actions went on one in place of another after %s: settle them by hand: %w", maxChain, rec.Key, ErrContradicted)
}

// ResolveNotApplied settles an unknown outcome as not applied: the next call
// for the action runs the tool once more, with the same key. attempts is the
// Record.Attempts of the outcome the person found not applied, as Show or
// Unknown returned it: if another attempt has run since (a call, a retry
// someone else allowed), the finding is about an outcome that is no longer
// the record's, and nothing is settled (ErrStale). While that attempt may
// still land (Settings.InFlight after it ended), the destination would
// not show it yet: nothing is settled (ErrInFlight, naming when to decide).
// by says who resolves; why is recorded with it.
func (o *Operator) ResolveNotApplied(ctx context.Context, ref string, attempts int, by, why string) error {
	h, err := o.hold(ctx, ref, by)
	if err != nil {
		return err
	}
	defer h.end()
	if err := h.about(ctx, "resolving", attempts); err != nil {
		return err
	}
	if err := h.landed(ctx, "resolving"); err != nil {
		return err
	}
	return h.notApplied(ctx, &Resolution{Verdict: "not applied", By: "operator:" + by, Why: why})
}

// Compensate settles an unknown outcome by undoing it: it runs the tool's
// Compensate function (which must be safe when the effect did not happen)
// and, if that succeeds, records the action as compensated (a definite
// failure, replayed to later calls). If it fails, the record stays unknown
// with the failure noted, and the error is returned. attempts is the
// Record.Attempts of the outcome the decision is about, as Show or Unknown
// returned it: if another attempt has run since, nothing is compensated
// (ErrStale); while that attempt may still land, nothing is compensated
// (ErrInFlight): an undoing could find nothing yet and call it undone. by
// says who decides; why is recorded with it.
func (o *Operator) Compensate(ctx context.Context, ref string, attempts int, by, why string) error {
	h, err := o.hold(ctx, ref, by)
	if err != nil {
		return err
	}
	defer h.end()
	if err := h.about(ctx, "compensating", attempts); err != nil {
		return err
	}
	if err := h.landed(ctx, "compensating"); err != nil {
		return err
	}
	if h.t.cfg.Compensate == nil {
		if serr := h.stillUnknown(ctx); serr != nil {
			return serr
		}
		return fmt.Errorf("agenttool: compensating %s: tool %q has no Compensate function: %w", ref, h.t.name, ErrInvalidRequest)
	}
	if _, err := h.t.compensate(ctx, h, Scope{}, &Resolution{By: "operator:" + by, Why: why}); err != nil {
		return fmt.Errorf("agenttool: compensating %s: %w", ref, err)
	}
	return nil
}

// Reconcile asks the destination about one reference with the tool's
// reconciler and settles the record by its answer: applied, not applied
// (approved for one more attempt), or left unknown.
func (o *Operator) Reconcile(ctx context.Context, ref, by string) (reconcile.Verdict, error) {
	h, err := o.hold(ctx, ref, by)
	if err != nil {
		return reconcile.CantSay, err
	}
	defer h.end()
	ans, err := h.reconcile(ctx, "operator:"+by)
	return ans.Verdict, err
}

// about checks, while the record is held, that a person's decision is about
// the record's current outcome: the attempts they saw are the record's. If
// not, the record is given back as it was and the answer is ErrStale.
func (h *holding) about(ctx context.Context, doing string, attempts int) error {
	if h.rec.Attempts == attempts {
		return nil
	}
	if err := h.stillUnknown(ctx); err != nil {
		return err
	}
	return fmt.Errorf("agenttool: %s %s: the decision is about attempt %d, and the record is at attempt %d: %w", doing, h.rec.Key, attempts, h.rec.Attempts, ErrStale)
}

// hold checks the caller's right to the record and takes it over. A record
// held by a live check or call is waited for, up to the tool's WaitTimeout
// (a check ends within CheckTimeout); then the answer is ErrBusy.
func (o *Operator) hold(ctx context.Context, ref, by string) (*holding, error) {
	if by == "" {
		return nil, fmt.Errorf("agenttool: resolving %s: say who resolves it: %w", ref, ErrInvalidRequest)
	}
	rec, err := o.Show(ctx, ref)
	if err != nil {
		return nil, err
	}
	t, err := o.toolOf(rec.Tool)
	if err != nil {
		return nil, fmt.Errorf("agenttool: resolving %s: %w", ref, err)
	}
	deadline := time.Now().Add(t.cfg.WaitTimeout)
	poll := 5 * time.Millisecond
	for {
		h, err := t.takeOver(ctx, ref)
		if !errors.Is(err, ErrBusy) || !time.Now().Before(deadline) {
			return h, err
		}
		if sleep(ctx, min(poll, time.Until(deadline))) != nil {
			return nil, err
		}
		poll = min(2*poll, 100*time.Millisecond)
	}
}

// clock is the operator's idea of now: the first tool's clock, or time.Now.
func (o *Operator) clock() time.Time {
	if o.now != nil {
		return o.now()
	}
	return time.Now()
}
