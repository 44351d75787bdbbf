package agenttool

import (
	"context"
	"errors"
	"fmt"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// errEarlierAttempt is the cause given when an unknown outcome comes from an
// earlier call (or a process that died), not from this call's attempt.
var errEarlierAttempt = errors.New("an earlier attempt of this action has an unknown outcome")

// reconcile asks the destination what became of the call's key; the call's
// flight keeps its lease while it asks. settled is false only for a not-applied verdict: the
// caller may then attempt again with the same key.
func (c *call) reconcile(attempts int, cause error) (env envelope.Envelope, settled bool) {
	cfg := c.t.cfg
	if err := c.fenceOwn(); err != nil {
		return c.markUnknown(attempts, fmt.Errorf("%w; the record could not be marked for the unknown fence before asking the destination: %v", cause, err)), true
	}
	info := CallInfo{RequestRef: c.ref, Scope: c.scope, Token: c.token, Codec: cfg.codec}
	req := reconcile.Request{Ref: c.ref, Attempts: attempts, LastSent: c.lastSent}
	ans := c.t.trust(c.t.check(withCallInfo(c.work, info), cfg.Reconciler, req), c.heldUntil)
	c.t.reported(c.ctx, ans, c.ref, "reconciler")
	switch ans.Verdict {
	case reconcile.Applied:
		return c.finish(Succeeded, reconciledSuccess(attempts, ans)), true
	case reconcile.NotApplied:
		c.maybeRan = false
		if ans.Fenced {
			// Proven: nothing this call sent has landed or can land.
			c.mayHaveActed = false
		}
		return envelope.Envelope{}, false
	}
	return c.markUnknown(attempts, fmt.Errorf("%w; the destination's answer: %s", cause, describe(ans))), true
}

// errCheckTimeout is the cause of a check's context that ran out of time.
var errCheckTimeout = errors.New("the check's time (CheckTimeout) ran out")

// check asks r about req within the tool's CheckTimeout. A check that has
// not answered by then, or whose context ends first, counts as can't say;
// if it ignores its context it is left to finish on its own, and its answer
// is dropped. A check that panics counts as can't say.
func (t *Tool) check(ctx context.Context, r reconcile.Reconciler, req reconcile.Request) reconcile.Answer {
	ctx, cancel := context.WithTimeoutCause(ctx, t.cfg.CheckTimeout, errCheckTimeout)
	defer cancel()
	done := make(chan reconcile.Answer, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				t.cfg.logger.Error("retrysafe: reconciler panicked", "tool", t.name, "ref", req.Ref, "panic", p)
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

func reconciledSuccess(attempts int, ans reconcile.Answer) envelope.Envelope {
	return envelope.Envelope{
		Status: envelope.Success, Attempts: attempts, Reconciled: true, Result: ans.Result, Next: envelope.Continue,
		Note: "The destination confirmed this was done; it was not repeated.",
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
