package agenttool

import (
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
	info := CallInfo{RequestRef: c.ref, Scope: c.scope, Token: c.token, Codec: cfg.codec}
	req := reconcile.Request{Ref: c.ref, Attempts: attempts, LastSent: c.lastSent}
	ans := c.t.trust(cfg.Reconciler.Check(withCallInfo(c.work, info), req), c.heldUntil)
	c.t.reported(ans, c.ref, "reconciler")
	switch ans.Verdict {
	case reconcile.Applied:
		return c.finish(Succeeded, reconciledSuccess(attempts, ans)), true
	case reconcile.NotApplied:
		c.maybeRan = false
		return envelope.Envelope{}, false
	}
	return c.markUnknown(attempts, fmt.Errorf("%w; the destination's answer: %s", cause, describe(ans))), true
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

func (t *Tool) reported(ans reconcile.Answer, ref, by string) {
	if h := t.cfg.Hooks.Reconcile; h != nil {
		h(ReconcileEvent{Tool: t.name, RequestRef: ref, Verdict: ans.Verdict, Err: ans.Err, By: by})
	}
}
