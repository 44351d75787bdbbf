package agenttool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe/internal/printable"
	"github.com/retrysafe/retrysafe/reconcile"
)

// errEarlierAttempt is the cause given when an unknown outcome comes from an
// earlier call (or a process that died), not from this call's attempt.
var errEarlierAttempt = errors.New("an earlier attempt of this action has an unknown outcome")

// errStoreWentBack is the cause given when the store had no record of the
// action but may have lost it (storekit.ClaimResult.Lost).
var errStoreWentBack = errors.New("the store of idempotency keys went back in time a short while ago (a failover to a standby that may not have had its last writes) and may have lost this action's record")

// errCheckTimeout is the cause of a check's context that ran out of time.
var errCheckTimeout = errors.New("the check's time (CheckTimeout) ran out")

// check asks r about req within the tool's CheckTimeout. A check that has
// not answered by then, or whose context ends first, counts as can't say;
// if it ignores its context it is left to finish on its own, and its answer
// is dropped. A check that panics counts as can't say.
func (t *Tool) check(ctx context.Context, r reconcile.Reconciler, req reconcile.Request, heldUntil time.Time) reconcile.Answer {
	asked := t.cfg.Now()
	return t.trust(t.ask(ctx, r, req), heldUntil, asked)
}

// ask asks r about req within CheckTimeout; a panic or no answer is
// CantSay.
func (t *Tool) ask(ctx context.Context, r reconcile.Reconciler, req reconcile.Request) reconcile.Answer {
	ctx, cancel := context.WithTimeoutCause(ctx, t.cfg.CheckTimeout, errCheckTimeout)
	defer cancel()
	done := make(chan reconcile.Answer, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				t.cfg.logger.Error("retrysafe: reconciler panicked", "tool", t.name, "ref", req.Ref, "panic", printable.Line(fmt.Sprint(p)))
				done <- reconcile.CantSayBecause(fmt.Errorf("the reconciler panicked: %v", p))
			}
		}()
		done <- r.Check(ctx, req)
	}()
	select {
	case ans := <-done:
		return ans
	case <-ctx.Done():
		select {
		case ans := <-done: // it answered as its context ended
			return ans
		default:
		}
		cause := context.Cause(ctx)
		if errors.Is(cause, errCheckTimeout) {
			return reconcile.CantSayBecause(fmt.Errorf("no answer within %v: %w", t.cfg.CheckTimeout, cause))
		}
		return reconcile.CantSayBecause(fmt.Errorf("no answer: %w", cause))
	}
}

func describe(ans reconcile.Answer) string {
	if ans.Verdict == reconcile.CantSay && ans.Err != nil {
		return fmt.Sprintf("%v (%v)", ans.Verdict, ans.Err)
	}
	return ans.Verdict.String()
}

func (t *Tool) reported(ctx context.Context, ans reconcile.Answer, ref, by string) {
	if h := t.cfg.Hooks.Reconcile; h != nil {
		h(ctx, ReconcileEvent{Tool: t.name, RequestRef: ref, Verdict: ans.Verdict, Err: ans.Err, By: by})
	}
}

// trust applies the in-flight rule to a destination's answer: when an
// attempt of the action may have been sent until heldUntil (the end of a
// lapsed lease taken over, or the end of an attempt of the call's own), a
// not-applied answer proves nothing until that attempt can no longer be in
// flight — heldUntil plus Settings.InFlight — and it was asked (asked)
// no earlier than that: the destination read what it answers at some
// moment after it was asked, maybe at once, so a question asked before
// then is answered about a moment the attempt may still have been on its
// way, however late the answer comes. Otherwise it counts as pending,
// unless the destination refuses stale requests (reconcile.Answer.Fenced).
func (t *Tool) trust(ans reconcile.Answer, heldUntil, asked time.Time) reconcile.Answer {
	if ans.Verdict != reconcile.NotApplied || ans.Fenced {
		return ans
	}
	if safe := t.landsUntil(heldUntil); asked.Before(safe) {
		return reconcile.Answer{Verdict: reconcile.Pending,
			Err: fmt.Errorf("not found, but an earlier holder's attempt may be in flight until %s", safe.Format(time.RFC3339Nano))}
	}
	return ans
}

// landsUntil is when a request an attempt may have sent until heldUntil
// can no longer land: heldUntil plus Settings.InFlight; zero if nothing
// was held.
func (t *Tool) landsUntil(heldUntil time.Time) time.Time {
	if heldUntil.IsZero() {
		return heldUntil
	}
	return heldUntil.Add(t.Settings().InFlight())
}
