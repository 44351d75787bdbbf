package agenttool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
)

// Invoke runs one guarded call and returns its envelope; [Tool.Call] is
// Invoke for agents. The life of a call:
//
//	parse and check the input; derive key and fingerprint once
//	claim the key in the store (fail closed if the store cannot answer)
//	  other principal, tool or input    → refused, nothing runs
//	  existing success or failure       → replay it, the tool does not run
//	  existing call still running       → wait for it (bounded), or in_progress
//	  existing unknown, or a dead lease → reconcilable: ask the destination first
//	                                        (applied → success; not applied → attempt);
//	                                      keyed: attempt again with the same key
//	                                        (past the destination's key lifetime: ask, or a person);
//	                                      at-most-once: the approver, or a person
//	  claimed, and the claim says an earlier action of the scope is unknown
//	                                    → the unknown fence settles it first, or holds this call
//	  claimed                           → attempt, retrying what is safe to retry;
//	                                      an unknown attempt is reconciled, or recorded unknown
func (t *Tool) Invoke(ctx context.Context, raw string) envelope.Envelope {
	hk := &t.cfg.Hooks
	if hk.Start == nil && hk.Outcome == nil {
		return t.invoke(ctx, raw)
	}
	start := t.cfg.Now()
	if hk.Start != nil {
		if started := hk.Start(ctx, StartEvent{Tool: t.name, Class: t.cfg.Class}); started != nil {
			ctx = started
		}
	}
	env := t.invoke(ctx, raw)
	if hk.Outcome != nil {
		hk.Outcome(ctx, OutcomeEvent{Envelope: env, Class: t.cfg.Class, Duration: t.cfg.Now().Sub(start)})
	}
	return env
}

func (t *Tool) invoke(ctx context.Context, raw string) envelope.Envelope {
	scope, ok := ScopeFrom(ctx)
	if !ok || !scope.valid() {
		if t.cfg.DefaultScope == nil {
			// The application forgot its part: say so to whoever runs it,
			// not only to the model.
			t.cfg.logger.Warn("retrysafe: a call without a scope was refused; set one with agenttool.WithScope", "tool", t.name)
			return t.refused("", &envelope.Error{Code: envelope.CodeMissingScope,
				Message: "the application set no principal and session for this call (agenttool.WithScope); nothing was run"},
				envelope.DoNotRetry, "This tool is not available in this context; tell the user it could not be used.")
		}
		scope = *t.cfg.DefaultScope
	}
	in, bad := t.parse(raw)
	if bad != nil {
		return t.refused("", bad, envelope.FixInput, "")
	}
	c := &call{t: t, ctx: ctx, work: ctx, args: in.args, scope: scope}
	c.principal, c.session = t.scopeDigests(scope)
	c.ref, c.owner = t.cfg.refAndOwner(t.name, scope, actionIDFrom(ctx), in.identifying)
	if err := ctx.Err(); err != nil {
		return t.refused(c.ref, &envelope.Error{Code: envelope.CodeCancelled,
			Message: fmt.Sprintf("the call was cancelled before the tool ran: %v", err)}, envelope.Wait, "")
	}
	if t.cfg.Class == ReadOnly {
		return c.attempts(0)
	}
	return c.claimAndRun(in.fingerprint)
}

// call is the state of one guarded call. Its flight and its first attempt's
// context live in it, so that a call allocates them once.
type call struct {
	t   *Tool
	ctx context.Context
	// work is the context of what the call does while it holds its key
	// (attempts, checks, backoff): ctx, cancelled with ErrLeaseLost when
	// the key's lease cannot be kept.
	work     context.Context
	stopWork context.CancelCauseFunc
	// leaseUntil is the end of the claim's lease; heldUntil, after a
	// takeover, the end of the earlier holder's (see storekit.ClaimResult); lastSent
	// the latest time an attempt of the action may have been sent.
	leaseUntil, heldUntil, lastSent time.Time
	args                            args
	scope                           Scope
	// principal and session are the scope's digests, as records keep them.
	principal, session Digest
	ref                string
	owner              string // the lease owner of the call's claims
	token              uint64
	maybeRan           bool         // an attempt of this key may have applied the effect
	mayHaveActed       bool         // maybeRan was ever true, whatever a check said since
	deferred           []*holding   // earlier actions found not applied, held while this call goes on in their place (settleDeferred)
	replayedAt         atomic.Int64 // the last attempt the destination said it replayed (DestinationReplayed)
	ownFenced          bool         // the record is marked for the unknown fence (fenceOwn)
	gaveUp             bool         // the call stopped waiting for another holder
	claimed            Record       // the record as the call's claim made it

	fl    flight     // while the call holds its key
	first attemptCtx // the first attempt's context
}

func (c *call) claimAndRun(fp Digest) envelope.Envelope {
	cfg := c.t.cfg
	req := storekit.ClaimRequest{
		Key: c.ref, Tool: c.t.name, Principal: c.principal, Session: c.session, Fingerprint: fp,
		Owner: c.owner, Lease: cfg.Lease,
		// Keyed tools retry with the same key; reconcilable ones take an
		// unknown record over to ask the destination first.
		TakeOver: cfg.Class == Keyed || (cfg.Class == Reconcilable && cfg.Reconciler != nil),
	}
	if cfg.Fence != FenceOff {
		req.Fence = &storekit.Fence{Session: cfg.Fence == FenceSession}
	}
	if label := labelFrom(c.ctx); label != "" {
		var err error
		if req.Label, err = c.t.seal(c.ref, label); err != nil {
			// The label is for people; the action goes on without it
			// rather than store it unencoded.
			cfg.logger.Warn("retrysafe: the codec could not encode the call's label; the record has none", "tool", c.t.name, "ref", c.ref, "err", err)
		}
	}
	var waitUntil, waitStart time.Time // set when a wait begins
	if h := cfg.Hooks.Waited; h != nil {
		defer func() {
			if !waitStart.IsZero() {
				h(c.ctx, WaitedEvent{Tool: c.t.name, RequestRef: c.ref, Duration: cfg.Now().Sub(waitStart), GaveUp: c.gaveUp})
			}
		}()
	}
	poll := 2 * time.Millisecond
	for {
		req.Now = cfg.Now()
		res, err := cfg.Store.Claim(c.ctx, req)
		if err != nil {
			return c.storeUnavailable(err)
		}
		switch {
		case res.Conflict == storekit.OtherPrincipal:
			return c.t.refused(c.ref, &envelope.Error{Code: envelope.CodeScopeMismatch,
				Message: "this request reference belongs to another principal; nothing was run"}, envelope.DoNotRetry, "")
		case res.Conflict == storekit.OtherTool:
			return c.t.refused(c.ref, &envelope.Error{Code: envelope.CodeScopeMismatch,
				Message: fmt.Sprintf("this request reference belongs to another tool than %s; nothing was run", c.t.name)}, envelope.DoNotRetry, "")
		case res.Conflict == storekit.OtherInput:
			env := c.t.refused(c.ref, &envelope.Error{Code: envelope.CodeKeyReused,
				Message: "this action was already requested with different input; nothing was run and the first request is unchanged"},
				envelope.AskHuman, "")
			env.Earlier = earlierOf(res.Record, req.Now)
			env.Note = fmt.Sprintf("The details differ from an earlier request for the same action, which %s; confirm with the user before changing it.",
				earlierPhrase(env.Earlier.State))
			return env
		case res.Claimed:
			return c.hold(res)
		}
		switch rec := res.Record; rec.State {
		case Succeeded, Failed:
			return c.replay(rec)
		case Unknown:
			if cfg.Class == AtMostOnce && cfg.Approver != nil {
				env, retry := c.askApprover(rec)
				if retry {
					continue // the record is approved for one more attempt: claim it
				}
				return env
			}
			c.replayed(Unknown)
			return c.unknown(rec.Attempts, true, &envelope.Error{Code: envelope.CodeOutcomeUnknown,
				Message: "an earlier attempt of this action has an unknown outcome and awaits reconciliation"})
		case Pending:
			now := req.Now
			if waitUntil.IsZero() {
				waitStart, waitUntil = now, now.Add(cfg.WaitTimeout)
			}
			if !now.Before(waitUntil) {
				c.gaveUp = true
				return c.inProgress(rec)
			}
			if err := c.waitFor(rec, earliest(waitUntil, rec.LeaseExpiry).Sub(now), &poll); err != nil {
				c.gaveUp = true
				return c.inProgress(rec)
			}
		default:
			return c.storeUnavailable(fmt.Errorf("record in state %v: %w", rec.State, ErrCorrupt))
		}
	}
}

// hold runs a call that has claimed its key, as one flight.
func (c *call) hold(res storekit.ClaimResult) envelope.Envelope {
	if h := c.t.cfg.Hooks.Claimed; h != nil {
		h(c.ctx, ClaimedEvent{Tool: c.t.name, RequestRef: c.ref, TookOver: res.TookOver, Attempts: res.Record.Attempts})
	}
	c.token, c.maybeRan, c.mayHaveActed = res.Record.Token, res.TookOver, res.TookOver
	c.leaseUntil, c.claimed = res.Record.LeaseExpiry, res.Record
	if res.TookOver {
		c.heldUntil = inFlightUntil(res)
		c.lastSent = c.heldUntil
	}
	c.work, c.stopWork = context.WithCancelCause(c.ctx)
	defer c.stopWork(nil)
	c.t.flights.begin(c)
	defer c.t.flights.end(c)
	normal := false
	defer func() { c.settleDeferred(normal) }()
	env := c.holdKey(res)
	normal = true
	return env
}

// holdKey is hold's work, once the call's flight has begun.
func (c *call) holdKey(res storekit.ClaimResult) envelope.Envelope {
	if c.maybeRan && c.t.cfg.Class == Keyed && c.t.cfg.keyForgotten(res.Record.Created) {
		// The destination may have forgotten the key: a retry with it is no
		// longer safe. Ask, or leave it to a person.
		if c.t.cfg.Reconciler == nil {
			c.putBack(res.Record)
			return c.keyForgotten(res.Record)
		}
		if env, settled := c.reconcile(res.Record.Attempts, errKeyForgotten); settled {
			return env
		}
	}
	if c.maybeRan && c.t.cfg.Class == Reconcilable {
		// Ask the destination before any new write.
		if env, settled := c.reconcile(res.Record.Attempts, errEarlierAttempt); settled {
			return env
		}
	}
	// Every attempt is a write: none runs while another action of the tool
	// in the scope is unknown — not a new action's, not a retry approved
	// by an operator or found not applied, not a keyed retry. The claim
	// said whether any is.
	// A notice the fence gave in the scope just now (NoticeHold) holds the
	// call back too.
	env, blocked := c.noticed()
	if !blocked && res.Fenced {
		env, blocked = c.fence()
		if !blocked {
			// The fence found nothing unknown: an action settled as
			// applied since the claim has been announced by now.
			env, blocked = c.noticed()
		}
	}
	if blocked {
		if h := c.t.cfg.Hooks.Fenced; h != nil && env.Earlier != nil {
			h(c.ctx, FencedEvent{Tool: c.t.name, RequestRef: c.ref, Earlier: env.Earlier.RequestRef, EarlierState: env.Earlier.State})
		}
		c.putBack(res.Record)
		if c.maybeRan && env.Status != envelope.UnknownOutcome {
			// This action's own outcome is unknown too: the call applied
			// nothing, but the action may have happened.
			env.Status, env.Next = envelope.UnknownOutcome, envelope.DoNotRetry
			env.Note = fmt.Sprintf("This action (%s) may already have happened; nothing new was done. "+
				"Tell the user it is pending, and do not call %s again until it is verified.", c.ref, c.t.name)
			if env.Earlier != nil {
				env.Note = fmt.Sprintf("This action (%s) may already have happened, and an earlier %s (%s) was confirmed done; nothing new was done. "+
					"Tell the user, and do not call %s again until it is verified.", c.ref, c.t.name, env.Earlier.RequestRef, c.t.name)
			}
		}
		return env
	}
	return c.attempts(res.Record.Attempts)
}

// putBack gives back a claim whose tool did not run: a new action's key is
// released; a record that existed is written back as it was, unknown (or
// approved for a retry, if it was, or was just found not applied), with
// its outcome and the end of its earlier holder's lease.
func (c *call) putBack(claimed Record) {
	if !c.maybeRan {
		c.giveBack(claimed.Attempts)
		return
	}
	c.t.flights.quiet(c)
	err := c.t.writeOutcome(c.ctx, storekit.FinishRequest{Key: c.ref, Token: c.token, State: Unknown, Attempts: claimed.Attempts,
		Outcome: claimed.Outcome, RetryApproved: !c.maybeRan, HeldUntil: later(c.heldUntil, c.lastSent)}, nil)
	if err != nil {
		c.t.cfg.logger.Warn("retrysafe: could not give back a record held back by the unknown fence", "ref", c.ref, "err", err)
	}
}

// waitFor waits until the holder of rec in this process ends, or for one poll
// interval (growing to 50ms) when the holder is elsewhere, at most d. A
// lease that has expired without the store granting the claim is polled
// too, never claimed again in a tight loop.
func (c *call) waitFor(rec Record, d time.Duration, poll *time.Duration) error {
	done := c.t.flights.done(c.ref)
	if d <= 0 {
		d, done = *poll, nil
	}
	if done == nil {
		d = min(d, *poll)
		*poll = min(*poll*2, 50*time.Millisecond)
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

// attempts runs the tool until it succeeds, fails definitely, or retrying is
// no longer safe or allowed. done counts attempts made before this call.
func (c *call) attempts(done int) envelope.Envelope {
	cfg := c.t.cfg
	var policy *backoff.ExponentialBackOff // made when a retry is first needed
	attempt := done
	for n := 1; ; n++ {
		if cause := context.Cause(c.work); errors.Is(cause, ErrLeaseLost) {
			return c.leaseLost(attempt, cause)
		}
		if c.maybeRan && cfg.Class == Keyed && cfg.keyForgotten(c.claimed.Created) {
			// The call's own retries reached the destination's key
			// lifetime: the next one could act twice. Ask, or stop.
			if cfg.Reconciler == nil {
				env := c.keyForgotten(c.claimed)
				env.Attempts, env.Replayed = attempt, false
				return c.finish(Unknown, env)
			}
			if env, settled := c.reconcile(attempt, errKeyForgotten); settled {
				return env
			}
		}
		attempt++
		if n > 1 && cfg.Class != ReadOnly {
			now := cfg.Now()
			until := now.Add(cfg.Lease)
			if err := cfg.Store.Renew(c.ctx, storekit.RenewRequest{Key: c.ref, Token: c.token, Until: until, Now: now}); err != nil {
				return c.stopRetrying(attempt-1, fmt.Errorf("renewing the lease before attempt %d: %w", attempt, err))
			}
			c.fl.keep.extended(until)
		}
		out, err := c.attempt(attempt)
		if err == nil {
			env := envelope.Envelope{Status: envelope.Success, Attempts: attempt, Result: out, Next: envelope.Continue}
			if c.replayedAt.Load() == int64(attempt) && c.claimed.Attempts == 0 && !c.mayHaveActed {
				// No earlier call attempted this action, and nothing this
				// call sent may have landed: what the destination replayed
				// was another caller's request.
				env.Replayed = true
				env.Note = "The destination had already done this for an earlier request; this is its result. Nothing was repeated."
			}
			return c.finish(Succeeded, env)
		}
		class := envelope.Classify(err)
		if class == envelope.Definite && c.maybeRan {
			// A refusal of this attempt says nothing about an earlier one
			// that may have applied: the outcome stays unknown.
			return c.markUnknown(attempt, fmt.Errorf("this attempt was refused (%w), but an earlier one may have applied", err))
		}
		if class == envelope.Definite {
			code := envelope.Code(err)
			if code == "" {
				code = envelope.CodeRejected
			}
			env := envelope.Envelope{
				Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: c.t.name, RequestRef: c.ref,
				Attempts: attempt, Next: envelope.DoNotRetry, Error: &envelope.Error{Code: code, Message: err.Error()},
			}
			if rerr := c.record(Failed, env); errors.Is(rerr, storekit.ErrEffectApplied) {
				return c.effectApplied(attempt, err)
			} else if rerr != nil {
				c.t.cfg.logger.Warn("retrysafe: outcome not recorded", "ref", c.ref, "state", Failed, "err", rerr)
			}
			return env
		}
		if class == envelope.Unknown && cfg.Class != ReadOnly {
			c.maybeRan, c.mayHaveActed = true, true
			switch {
			case cfg.Class == Keyed && n < cfg.Retry.MaxAttempts:
				// Retried below: other writes in the scope wait meanwhile.
				if ferr := c.fenceOwn(); ferr != nil {
					return c.markUnknown(attempt, fmt.Errorf("%w; the record could not be marked for the unknown fence before a retry: %v", err, ferr))
				}
			case cfg.Class == Reconcilable && cfg.Reconciler != nil:
				if env, settled := c.reconcile(attempt, err); settled {
					return env
				}
				// Not applied: a new attempt with the same key is safe.
			case cfg.Class != Keyed:
				return c.markUnknown(attempt, err)
			}
		}
		if n >= cfg.Retry.MaxAttempts {
			return c.stopRetrying(attempt, err)
		}
		if policy == nil {
			policy = newBackOff(cfg.Retry, cfg.Now)
		}
		wait := policy.NextBackOff()
		if wait < 0 {
			return c.stopRetrying(attempt, err)
		}
		if h := cfg.Hooks.Retry; h != nil {
			h(c.ctx, RetryEvent{Tool: c.t.name, RequestRef: c.ref, Attempt: attempt, Err: err, Wait: wait})
		}
		if sleep(c.work, wait) != nil {
			return c.stopRetrying(attempt, err)
		}
	}
}

// fenceOwn marks the call's record as one whose action may have applied
// (storekit.RenewRequest.MaybeApplied), before the call checks or retries
// it: the unknown fence then holds back other writes of the tool in the
// scope, as it does for an unknown record. A record taken over is marked
// already.
func (c *call) fenceOwn() error {
	cfg := c.t.cfg
	if c.ownFenced || c.claimed.TakenOver || cfg.Fence == FenceOff {
		return nil
	}
	now := cfg.Now()
	until := now.Add(cfg.Lease)
	if err := cfg.Store.Renew(c.ctx, storekit.RenewRequest{Key: c.ref, Token: c.token, Until: until, Now: now, MaybeApplied: true}); err != nil {
		return err
	}
	c.fl.keep.extended(until)
	c.ownFenced = true
	return nil
}

// attempt runs the tool once with the call's information on its context.
func (c *call) attempt(n int) (json.RawMessage, error) {
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
	if d := cfg.keyDeadline(c.claimed.Created); cfg.Class == Keyed && !d.IsZero() {
		// A request that reached the destination after it forgot the key
		// could act twice: the attempt stops before then.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, time.Now().Add(d.Sub(cfg.Now())), errKeyDeadline)
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

// stopRetrying ends a call whose last attempt was transient (or unknown for a
// keyed tool) and which may not retry any more.
func (c *call) stopRetrying(attempts int, err error) envelope.Envelope {
	if c.t.cfg.Class == ReadOnly {
		return c.t.refusedAfter(c.ref, attempts, envelope.CodeUnavailable, err)
	}
	if c.maybeRan {
		return c.markUnknown(attempts, err)
	}
	// No attempt applied the effect: free the key so that a later call can
	// try afresh.
	if gerr := c.giveBack(attempts); errors.Is(gerr, storekit.ErrEffectApplied) {
		return c.effectApplied(attempts, err)
	}
	return c.t.refusedAfter(c.ref, attempts, envelope.CodeUnavailable, err)
}

// effectApplied ends a call whose tool reported a failure after an effect
// committed under its key (the store refused to forget it): the action
// happened. The destination is asked, if the tool has a reconciler;
// otherwise the outcome is recorded as unknown, never as not applied.
func (c *call) effectApplied(attempts int, err error) envelope.Envelope {
	c.maybeRan, c.mayHaveActed = true, true
	cause := fmt.Errorf("the tool reported %w after its effect was recorded", err)
	if cfg := c.t.cfg; cfg.Reconciler != nil && cfg.Class != AtMostOnce {
		if env, settled := c.reconcile(attempts, cause); settled {
			return env
		}
	}
	return c.markUnknown(attempts, cause)
}

// giveBack returns the call's key when no attempt applied the effect, after
// attempts attempts in all. A new action's key is released, so that a later
// call tries afresh. A record that existed before the call (a retry
// approved by a person or found not applied) is written back unknown and
// approved for a retry, with the attempts counted: released, its count
// would start again at 1, and an approval bound to an older outcome would
// match anew. If the write fails the lease expires and the record is then
// treated as unknown: safe, if cautious. A store that refuses because an
// effect committed under the key says so (storekit.ErrEffectApplied).
func (c *call) giveBack(attempts int) error {
	c.t.flights.quiet(c) // a renewal of a given-back key would only fail
	var err error
	if c.claimed.Attempts == 0 {
		ctx, cancel := c.outcomeCtx()
		err = c.t.cfg.Store.Release(ctx, c.ref, c.token)
		cancel()
	} else {
		err = c.t.writeOutcome(c.ctx, storekit.FinishRequest{Key: c.ref, Token: c.token, State: Unknown, Attempts: attempts,
			Outcome: c.claimed.Outcome, RetryApproved: true, HeldUntil: later(c.heldUntil, c.lastSent)}, nil)
	}
	if err != nil && !errors.Is(err, storekit.ErrEffectApplied) {
		c.t.cfg.logger.Warn("retrysafe: could not give back a key whose tool did not apply the effect", "ref", c.ref, "err", err)
	}
	return err
}

// leaseLost ends a call whose lease could not be kept before its next
// attempt: another call may take the key over, so nothing more is run.
func (c *call) leaseLost(attempts int, cause error) envelope.Envelope {
	if c.maybeRan {
		return c.markUnknown(attempts, cause)
	}
	if err := c.giveBack(attempts); errors.Is(err, storekit.ErrEffectApplied) {
		return c.effectApplied(attempts, cause)
	}
	return c.t.refused(c.ref, &envelope.Error{Code: envelope.CodeStoreUnavailable,
		Message: fmt.Sprintf("the key's lease could not be kept, so the tool was not run: %v", cause)},
		envelope.Wait, "Nothing was done. Try again later.")
}

func (t *Tool) refusedAfter(ref string, attempts int, code string, err error) envelope.Envelope {
	return envelope.Envelope{
		Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: t.name, RequestRef: ref,
		Attempts: attempts, Next: envelope.Wait,
		Error: &envelope.Error{Code: code, Message: fmt.Sprintf("not applied; the destination is unavailable: %v", err)},
		Note:  "Nothing was done. The same call can be tried again later.",
	}
}

func (c *call) markUnknown(attempts int, err error) envelope.Envelope {
	env := c.unknown(attempts, false, &envelope.Error{Code: envelope.CodeOutcomeUnknown,
		Message: fmt.Sprintf("the outcome is unknown: %v", err)})
	return c.finish(Unknown, env)
}

// unknown builds an unknown_outcome envelope with the guidance of the tool's class.
func (c *call) unknown(attempts int, replayed bool, e *envelope.Error) envelope.Envelope {
	env := envelope.Envelope{
		Version: envelope.Version, Status: envelope.UnknownOutcome, Tool: c.t.name, RequestRef: c.ref,
		Attempts: attempts, Replayed: replayed, Error: e,
	}
	switch c.t.cfg.Class {
	case Keyed:
		env.Next = envelope.Wait
		env.Note = fmt.Sprintf("This may already have happened. Calling %s again later with the same input is safe: reference %s makes the destination do it at most once.", c.t.name, c.ref)
	case AtMostOnce:
		env.Next = envelope.AskHuman
		env.Note = fmt.Sprintf("This may already have happened and cannot be checked automatically. Do not call %s again for it; ask a person to confirm reference %s.", c.t.name, c.ref)
	default:
		env.Next = envelope.DoNotRetry
		env.Note = fmt.Sprintf("This may already have happened. Do not call %s again for it; reference %s is being verified. Tell the user it is pending.", c.t.name, c.ref)
	}
	return env
}

// errKeyDeadline is the cause of a keyed attempt's context that ended when
// the destination may forget the key.
var errKeyDeadline = errors.New("the attempt was stopped: the destination may forget its idempotency key now (DestinationKeyTTL)")

// errKeyForgotten is the cause of an unknown outcome that a keyed tool
// cannot retry: the destination may no longer know the key.
var errKeyForgotten = errors.New("an earlier attempt's outcome is unknown, and the destination may have forgotten its idempotency key")

// keyDeadline is when, on this process's clock, the destination may forget
// the key of an action first claimed at created: DestinationKeyTTL later,
// less ClockSkew (another process's clock may have written created). Zero
// if the destination keeps keys forever. Every keyed attempt ends by it.
func (c *config) keyDeadline(created time.Time) time.Time {
	if c.DestinationKeyTTL <= 0 || created.IsZero() {
		return time.Time{}
	}
	return created.Add(c.DestinationKeyTTL - c.ClockSkew)
}

// keyForgotten reports whether the destination may have forgotten the key
// of an action first claimed at created: a retry with it is no longer
// blind-safe.
func (c *config) keyForgotten(created time.Time) bool {
	d := c.keyDeadline(created)
	return !d.IsZero() && !c.Now().Before(d)
}

// keyForgotten is the envelope of a keyed action whose outcome is unknown
// and whose key the destination may have forgotten, without a reconciler.
func (c *call) keyForgotten(rec Record) envelope.Envelope {
	return envelope.Envelope{
		Version: envelope.Version, Status: envelope.UnknownOutcome, Tool: c.t.name, RequestRef: c.ref,
		Attempts: rec.Attempts, Replayed: true, Next: envelope.AskHuman,
		Error: &envelope.Error{Code: envelope.CodeOutcomeUnknown, Message: fmt.Sprintf(
			"%v (first sent %s, longer ago than the destination keeps keys, %v); it is not retried blindly", errKeyForgotten,
			rec.Created.UTC().Format(time.RFC3339), c.t.cfg.DestinationKeyTTL)},
		Note: fmt.Sprintf("This may already have happened, and it is too old to retry safely. Do not call %s again for it; ask a person to check reference %s.", c.t.name, c.ref),
	}
}

func (c *call) inProgress(rec Record) envelope.Envelope {
	if by, ok := replacedBy(rec); ok {
		// Not running: held by another call's fence, which is asking the
		// destination about it and, if it was not applied, goes on in its
		// place. Which of the two is not known here.
		env := envelope.Envelope{
			Version: envelope.Version, Status: envelope.UnknownOutcome, Tool: c.t.name, RequestRef: c.ref,
			Attempts: rec.Attempts, Next: envelope.AskHuman,
			Error: &envelope.Error{Code: envelope.CodeEarlierUnknown, Message: fmt.Sprintf(
				"this action is held by another %s (%s), which is checking whether it was done and, if it was not, is to be done in its place; this call was not run", c.t.name, by)},
			Earlier: &envelope.Earlier{RequestRef: by, State: envelope.ActionRunning},
			Note: fmt.Sprintf("This may or may not have been done: it is being checked, and another %s (reference %s) may be done in its place. "+
				"Nothing new was done. Tell the user it is pending, and ask before calling %s for it again.", c.t.name, by, c.t.name),
		}
		if h := c.t.cfg.Hooks.Fenced; h != nil {
			h(c.ctx, FencedEvent{Tool: c.t.name, RequestRef: c.ref, Earlier: by, EarlierState: env.Earlier.State})
		}
		return env
	}
	return envelope.Envelope{
		Version: envelope.Version, Status: envelope.UnknownOutcome, Tool: c.t.name, RequestRef: c.ref,
		Attempts: rec.Attempts, Next: envelope.Wait,
		Error:   &envelope.Error{Code: envelope.CodeInProgress, Message: "another call for this action is still running"},
		Earlier: &envelope.Earlier{RequestRef: rec.Key, State: envelope.ActionRunning},
		Note:    "The same action is already in progress. Wait, then call again with the same input to get its outcome; it will not run twice.",
	}
}

// earlierOf says what became of the action of rec, for a refusal that met
// it.
func earlierOf(rec Record, now time.Time) *envelope.Earlier {
	e := &envelope.Earlier{RequestRef: rec.Key, State: envelope.ActionUnknown}
	switch {
	case rec.State == Succeeded:
		e.State = envelope.ActionSucceeded
	case rec.State == Failed, rec.State == Unknown && rec.RetryApproved:
		e.State = envelope.ActionFailed
	case rec.State == Pending && now.Before(rec.LeaseExpiry):
		e.State = envelope.ActionRunning
	}
	return e
}

// earlierPhrase says an earlier action's state in words for a note.
func earlierPhrase(s envelope.ActionState) string {
	switch s {
	case envelope.ActionSucceeded:
		return "was done"
	case envelope.ActionFailed:
		return "was not done"
	case envelope.ActionRunning:
		return "is still running"
	}
	return "may or may not have happened and is being verified"
}

func (c *call) storeUnavailable(err error) envelope.Envelope {
	return c.t.refused(c.ref, &envelope.Error{Code: envelope.CodeStoreUnavailable,
		Message: fmt.Sprintf("the idempotency store could not be used, so the tool was not run: %v", err)},
		envelope.Wait, "Nothing was done. Try again later.")
}

// replayed tells the Replayed hook that the call answers with a recorded
// outcome.
func (c *call) replayed(s State) {
	if h := c.t.cfg.Hooks.Replayed; h != nil {
		h(c.ctx, ReplayedEvent{Tool: c.t.name, RequestRef: c.ref, State: s})
	}
}

// replay returns a recorded outcome; the tool does not run. An outcome that
// cannot be read does not change what the record's state says: a succeeded
// action is answered as a success without its result.
func (c *call) replay(rec Record) envelope.Envelope {
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
		if rec.State == Succeeded {
			return envelope.Envelope{
				Version: envelope.Version, Status: envelope.Success, Tool: c.t.name, RequestRef: c.ref,
				Attempts: max(rec.Attempts, 1), Replayed: true, Next: envelope.Continue,
				Note: "Already done by an earlier call, which was recorded; its result cannot be read back. Nothing was repeated.",
			}
		}
		return c.t.refused(c.ref, &envelope.Error{Code: envelope.CodeStoreUnavailable,
			Message: fmt.Sprintf("an earlier call for this action was recorded as not applied, but its outcome cannot be read: %v", err)},
			envelope.AskHuman, "This action was not done by the earlier call; its details cannot be read. Ask the user before trying again.")
	}
	env.Replayed = true
	if env.Note == "" && env.Status == envelope.Success {
		env.Note = "Already done by an earlier call; this is its recorded result. Nothing was repeated."
	}
	return env
}

// statusOf is the envelope status of a final record state.
func statusOf(s State) envelope.Status {
	if s == Succeeded {
		return envelope.Success
	}
	return envelope.DefiniteFailure
}

// finish records a final outcome and returns env completed with the call's
// identity. The outcome is recorded on a context that survives the caller's
// cancellation: an effect that happened must not go unrecorded because the
// caller stopped listening.
func (c *call) finish(state State, env envelope.Envelope) envelope.Envelope {
	cfg := c.t.cfg
	env.Version, env.Tool, env.RequestRef = envelope.Version, c.t.name, c.ref
	if h := cfg.Hooks.Unknown; h != nil && state == Unknown {
		e := UnknownEvent{Tool: c.t.name, RequestRef: c.ref, Attempts: env.Attempts}
		if env.Error != nil {
			e.Reason = env.Error.Message
		}
		h(c.ctx, e)
	}
	if cfg.Class == ReadOnly {
		return env
	}
	replaces := len(c.deferred) > 0
	if state == Succeeded && (c.claimed.TakenOver || c.claimed.Attempts > 0 || replaces) {
		// The action's outcome was unknown before this call (taken over,
		// or a retry approved after it), or this call went on in place of
		// such an action found not applied: the model may have sent a
		// copy in other words, or the other one again, in the same turn.
		c.t.announce(c.principal, c.session, notice{earlier: c.ref, result: env.Result, replaced: replaces && !c.claimed.TakenOver && c.claimed.Attempts == 0})
	}
	err := c.record(state, env)
	if err == nil {
		return env
	}
	cfg.logger.Warn("retrysafe: outcome not recorded", "ref", c.ref, "state", state, "err", err)
	if errors.Is(err, storekit.ErrFenced) {
		env.Note = "Another call took this action over while it ran; this outcome is what this call saw."
	}
	// The envelope stays true to what happened. The record stays pending, its
	// lease expires, and the next call treats it as unknown: never as free.
	return env
}

func (c *call) record(state State, env envelope.Envelope) error {
	req := storekit.FinishRequest{Key: c.ref, Token: c.token, State: state, Attempts: env.Attempts}
	if state == Unknown {
		req.HeldUntil = later(c.heldUntil, c.lastSent)
	}
	return c.t.writeOutcome(c.ctx, req, &env)
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

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
