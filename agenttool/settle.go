package agenttool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/reconcile"

	"github.com/retrysafe/retrysafe/envelope"
)

// Errors of settling an unknown outcome.
var (
	// ErrNotUnknown: the record's outcome is not unknown (it is settled, or
	// approved for a retry), so there is nothing to resolve.
	ErrNotUnknown = errors.New("record is not awaiting reconciliation")
	// ErrBusy: a live call holds the record; try again after it ends.
	ErrBusy = errors.New("record is held by a live call")
	// ErrStale: the record has moved on since the decision was made about
	// it (another attempt ran): nothing was settled; look at it again.
	ErrStale = errors.New("the record has changed since it was read")
	// ErrContradicted: an answer proves applied an action recorded as
	// failed — an attempt a person or a check found not applied landed
	// after all. If the attempt that finding allowed failed, nothing is
	// settled (the model was told, and may have acted on it). If another
	// write went on in the action's place, and did or may have done
	// something, or holds the scope, the action is settled applied aside
	// from the scope, and that other write may be this action reworded
	// ([Operator.SettleByAnswer] returns Applied with this error, naming
	// it). Either way a person should look: the action was done.
	ErrContradicted = errors.New("the answer contradicts the action's recorded failure")
	// ErrInFlight: an attempt of the action may still land at its
	// destination — it may have been sent until the record's HeldUntil,
	// and lands within Settings.InFlight of that — so a finding that it
	// did nothing, or an undoing of it, proves nothing of it yet. Nothing
	// was settled; the error names the time after which to decide.
	ErrInFlight = errors.New("an attempt of the action may still land")
	// ErrSentOtherwise: the action handed its destination the reference
	// otherwise than the tool asked to check it does (Options.RefSentAs
	// changed since): its reconciler could look for the action where it
	// never was, and its compensation (Options.Compensate) find nothing
	// to undo and call it undone. Nothing was asked, run or settled; a person
	// settles it (Operator.ResolveApplied, ResolveNotApplied), or a
	// replica that sends it as it was sent.
	ErrSentOtherwise = errors.New("the action was sent otherwise than this definition of its tool sends it")
)

// holding is an unknown record taken over to be settled. Its lease is kept
// while it is held, and its work (a check, a compensation) runs on a
// context that ends if the lease cannot be kept: at most one reconciler or
// compensation runs per key at a time.
type holding struct {
	t         *Tool
	rec       Record // as it was before the takeover
	token     uint64
	heldUntil time.Time // the latest time an earlier attempt may have been sent or in flight (inFlightUntil)
	work      context.Context
	stopWork  context.CancelCauseFunc
	keep      keeper
}

// hold starts keeping a taken-over record's lease. The attempt count is the
// claim's: a takeover of a lapsed lease counts the dead holder's attempt,
// and every settlement keeps it.
func (t *Tool) hold(ctx context.Context, rec Record, res storekit.ClaimResult) *holding {
	rec.Attempts = res.Record.Attempts
	h := &holding{t: t, rec: rec, token: res.Record.Token, heldUntil: inFlightUntil(res)}
	h.work, h.stopWork = context.WithCancelCause(ctx)
	h.keep.start(t, ctx, rec.Key, h.token, res.Record.LeaseExpiry, h.stopWork)
	return h
}

// takeOver claims a record that awaits reconciliation, so that its outcome can
// be settled by one party at a time. The claim is made with the record's own
// principal, fingerprint and fence scope: it settles exactly that key and
// input, and the record keeps the scope's slot while it is held.
func (t *Tool) takeOver(ctx context.Context, key string) (*holding, error) {
	cfg := t.cfg
	rec, err := cfg.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	now := cfg.Now()
	if !rec.AwaitsReconciliation(now) {
		switch {
		case rec.State == Pending:
			return nil, fmt.Errorf("agenttool: %s: %w", key, ErrBusy)
		case rec.State == Unknown && rec.RetryApproved:
			return nil, fmt.Errorf("agenttool: %s was approved for one more attempt, which has not run yet: %w", key, ErrNotUnknown)
		}
		return nil, fmt.Errorf("agenttool: %s is %v: %w", key, rec.State, ErrNotUnknown)
	}
	res, err := cfg.Store.Claim(ctx, storekit.ClaimRequest{
		Key: key, Tool: rec.Tool, Principal: rec.Principal, Session: rec.Session, Fingerprint: rec.Fingerprint,
		Owner: newOwner(), Now: now, Lease: cfg.Lease, TakeOver: true, FenceScope: rec.FenceScope, KeyTTL: cfg.KeyTTL, Unkeyed: cfg.unkeyed(),
	})
	switch {
	case err != nil:
		return nil, err
	case res.Claimed && res.TookOver:
		return t.hold(ctx, rec, res), nil
	case res.Claimed:
		// Between the read and the claim the record was approved for a retry,
		// and this claim consumed the approval: give it back.
		h := t.hold(ctx, res.Record, res)
		if err := h.finish(ctx, Unknown, nil, nil, true); err != nil { // nil keeps the record's resolution
			return nil, err
		}
		return nil, fmt.Errorf("agenttool: %s was just approved for a retry: %w", key, ErrNotUnknown)
	case res.Record.State == Pending:
		return nil, fmt.Errorf("agenttool: %s: %w", key, ErrBusy)
	}
	return nil, fmt.Errorf("agenttool: %s is %v: %w", key, res.Record.State, ErrNotUnknown)
}

// applied records the effect as done, with the destination's result. The
// record keeps the scope's slot with a notice: its outcome was unknown, and
// the scope's other new writes are told of it first, until a call is told
// (the fence's call, kept held back by it: storekit.DecideClaim) and
// NoticeHold after.
func (h *holding) applied(ctx context.Context, result json.RawMessage, res *Resolution) (envelope.Envelope, error) {
	env := h.t.answerFor(h.rec.Key, answer{reason: reasonSettledApplied, attempts: h.rec.Attempts, result: result})
	return env, h.finish(ctx, Succeeded, &env, res, false)
}

// notApplied records that the effect did not happen: one more attempt of the
// key may run.
func (h *holding) notApplied(ctx context.Context, res *Resolution) error {
	return h.finish(ctx, Unknown, nil, res, true)
}

// landed gives the record back unknown and answers ErrInFlight while an
// attempt of it may still land (the in-flight rule, as for a
// destination's answer: [Tool.trust]): a person who finds it not applied,
// or undoes it, decides about an attempt that may still be on its way.
func (h *holding) landed(ctx context.Context, doing string) error {
	safe := h.t.landsUntil(h.heldUntil)
	if !h.t.cfg.Now().Before(safe) {
		return nil
	}
	if err := h.stillUnknown(ctx); err != nil {
		return err
	}
	return fmt.Errorf("agenttool: %s %s: attempt %d may still land until %s: decide after that: %w",
		doing, h.rec.Key, h.rec.Attempts, safe.Format(time.RFC3339), ErrInFlight)
}

// stillUnknown gives the record back as it was: unknown, unresolved.
func (h *holding) stillUnknown(ctx context.Context) error {
	return h.finish(ctx, Unknown, nil, nil, false)
}

// end lets the record go without settling it, if nothing settled it: its
// lease is no longer renewed (it lapses, and the record can be taken over
// again) and its work is cancelled. Deferred by every holder, so that a
// check or a compensation that panics does not hold the record for as long
// as the process lives. It may be called more than once.
func (h *holding) end() {
	h.keep.stop()
	h.stopWork(nil)
}

// finish writes the settled state and lets the record go. A nil env keeps
// the record's outcome. The resolution's who and why pass through the
// tool's codec (I8).
func (h *holding) finish(ctx context.Context, state State, env *envelope.Envelope, res *Resolution, approve bool) error {
	h.keep.stop()
	defer h.stopWork(nil)
	if res != nil {
		if res.At.IsZero() {
			res.At = h.t.cfg.Now()
		}
		sealed, err := h.t.sealResolution(h.rec.Key, res)
		if err != nil {
			return err
		}
		res = sealed
	}
	req := storekit.FinishRequest{
		Key: h.rec.Key, Token: h.token, State: state, Attempts: h.rec.Attempts, Outcome: h.rec.Outcome,
		RetryApproved: approve, Resolution: res,
	}
	switch {
	case state == Unknown && !approve:
		req.HeldUntil = h.heldUntil
	case state == Succeeded:
		req.NoticeUntil = h.t.cfg.noticeUntil(false)
	}
	return h.t.writeOutcome(ctx, req, env)
}

// reconcile asks the tool's reconciler about a held record and settles it
// by the answer, which it returns.
func (h *holding) reconcile(ctx context.Context, by string) (reconcile.Answer, error) {
	r := h.t.cfg.Reconciler
	if r == nil {
		return reconcile.Answer{Verdict: reconcile.CantSay}, errors.Join(fmt.Errorf("agenttool: tool %q has no reconciler: %w", h.t.name, ErrInvalidRequest), h.stillUnknown(ctx))
	}
	if err := h.sentOtherwise(); err != nil {
		return reconcile.Answer{Verdict: reconcile.CantSay}, errors.Join(err, h.stillUnknown(ctx))
	}
	ans := h.ask(ctx, by)
	switch ans.Verdict {
	case reconcile.Applied:
		_, err := h.applied(ctx, ans.Result, &Resolution{Verdict: "applied", By: by})
		return ans, err
	case reconcile.NotApplied:
		return ans, h.notApplied(ctx, &Resolution{Verdict: "not applied", By: by})
	}
	return ans, h.stillUnknown(ctx)
}

// sentOtherwise returns an error wrapping ErrSentOtherwise if the held
// record's action was sent otherwise than h's tool sends it: the tool may
// neither check nor compensate it. nil otherwise.
func (h *holding) sentOtherwise() error {
	cfg := h.t.cfg
	if !cfg.sentOtherwise(&h.rec) {
		return nil
	}
	return fmt.Errorf("agenttool: %s was sent under definition %s of tool %q, and this one is %s (%s): %w",
		h.rec.Key, definitionName(h.rec.Definition), h.t.name, definitionName(cfg.definition), cfg.definitionText, ErrSentOtherwise)
}

// ask asks the destination about the held record through the tool's
// reconciler (which must be set), by the trust rule, and reports the
// answer; it writes nothing.
func (h *holding) ask(ctx context.Context, by string) reconcile.Answer {
	info := CallInfo{RequestRef: h.rec.Key, Token: h.token, Codec: h.t.cfg.codec}
	req := reconcile.Request{Ref: h.rec.Key, Attempts: h.rec.Attempts, LastSent: h.heldUntil}
	if h.rec.Input != nil {
		in, err := h.t.cfg.inputCodec.Decode(h.rec.Key, h.rec.Input)
		if err != nil {
			h.t.cfg.logger.Warn("retrysafe: the codec could not decode the input kept with a record; the reconciler is asked without it",
				"tool", h.t.name, "ref", h.rec.Key, "err", err)
		} else {
			req.Input = in
		}
	}
	ans := h.t.check(withCallInfo(h.work, info), h.t.cfg.Reconciler, req, h.heldUntil)
	h.t.reported(ctx, ans, h.rec.Key, by)
	return ans
}
