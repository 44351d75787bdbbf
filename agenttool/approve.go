package agenttool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe/internal/printable"
)

// Approver decides what happens to an at-most-once action whose outcome is
// unknown. It is asked each time a call meets such a key, and may answer
// Undecided (a person has not decided yet: a ticket is open, a message is
// waiting). A RetryOnce or Compensate given while the last attempt may
// still land (Settings.InFlight after it ended) waits: the call answers
// unknown_outcome, saying until when, and the decision given again after
// that takes effect. An Approver must be safe for concurrent use.
type Approver interface {
	Approve(ctx context.Context, req ApprovalRequest) (Approval, error)
}

// ApproverFunc adapts a function to an Approver.
type ApproverFunc func(ctx context.Context, req ApprovalRequest) (Approval, error)

// Approve calls f.
func (f ApproverFunc) Approve(ctx context.Context, req ApprovalRequest) (Approval, error) {
	return f(ctx, req)
}

// ApprovalRequest describes the action awaiting a decision.
type ApprovalRequest struct {
	Tool       string
	RequestRef string
	Scope      Scope     // the trusted scope of the call that asks
	Attempts   int       // attempts made so far: the outcome to decide on (see Approval.Attempts)
	Since      time.Time // when the outcome became unknown
	Label      string    // the call's label ([WithLabel]), "" if none
}

// Decision is an approver's answer.
type Decision uint8

const (
	// Undecided: nothing runs; the model is told to ask a human.
	Undecided Decision = iota
	// RetryOnce: a person confirmed the effect did not happen; exactly one
	// more attempt may run for this key and input.
	RetryOnce
	// Compensate: run the tool's Compensate function to undo the effect if
	// it happened, and close the action as not applied.
	Compensate
)

func (d Decision) String() string {
	switch d {
	case Undecided:
		return "undecided"
	case RetryOnce:
		return "retry once"
	case Compensate:
		return "compensate"
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// Approval is an approver's decision, with who made it and why. It is
// recorded with the key's record.
//
// A decision is bound to one unknown outcome: Attempts must be the
// ApprovalRequest.Attempts the person decided on. A decision for another
// attempt count is stale and ignored, so a ticket that stays "approved"
// allows exactly one more attempt, not one per call. Compensate runs at
// most once per outcome: after a failed compensation, the record waits for
// an operator.
type Approval struct {
	Decision Decision
	By       string // who decided; required for RetryOnce and Compensate
	Reason   string
	Attempts int // the ApprovalRequest.Attempts decided on; required for RetryOnce and Compensate
}

// approve asks the tool's approver about the unknown record the claim met
// (c.other): one more attempt, a compensation, or nothing yet.
func (c *call) approve() outcome {
	cfg := c.t.cfg
	rec := c.other
	waiting := func(why string) outcome {
		return c.answer(approverAnswered, answer{reason: reasonApprovalPending, attempts: rec.Attempts, why: why, replayed: true})
	}
	a, err := cfg.Approver.Approve(c.ctx, ApprovalRequest{
		Tool: c.t.name, RequestRef: c.ref, Scope: c.scope, Attempts: rec.Attempts, Since: rec.Updated,
		Label: labelFrom(c.ctx),
	})
	if h := cfg.Hooks.Approval; h != nil {
		h(c.ctx, ApprovalEvent{Tool: c.t.name, RequestRef: c.ref, Attempts: rec.Attempts, Decision: a.Decision, By: a.By, Err: err})
	}
	if err != nil {
		cfg.logger.Warn("retrysafe: approver failed", "ref", c.ref, "err", printable.Line(err.Error()))
		return waiting(fmt.Sprintf("the outcome is unknown and the approver could not be asked: %v", err))
	}
	if a.Decision == Undecided {
		return waiting("the outcome is unknown and awaits a person's decision")
	}
	if a.By == "" || (a.Decision == Compensate && cfg.Compensate == nil) || a.Decision > Compensate {
		cfg.logger.Warn("retrysafe: approval ignored: it names no approver, or asks to compensate without a Compensate function", "ref", c.ref)
		return waiting("the outcome is unknown; the approval given was incomplete and was ignored")
	}
	if a.Attempts != rec.Attempts {
		cfg.logger.Warn("retrysafe: approval ignored: it was given for another outcome of this action", "ref", c.ref,
			"approved_attempts", a.Attempts, "attempts", rec.Attempts)
		return waiting(fmt.Sprintf("the outcome of attempt %d is unknown; the approval given was for attempt %d, and one approval allows one attempt", rec.Attempts, a.Attempts))
	}
	if a.Decision == Compensate && rec.Resolution != nil && rec.Resolution.Verdict == verdictCompensationFailed {
		return waiting("a compensation was already tried for this outcome and failed; an operator must settle it")
	}
	h, err := c.t.takeOver(c.ctx, c.ref)
	if errors.Is(err, ErrNotUnknown) {
		return approvedRetry // settled meanwhile: claim again, and replay what it became
	}
	if err != nil {
		return waiting(fmt.Sprintf("the outcome is unknown; the approval could not be applied: %v", err))
	}
	defer h.end()
	if h.rec.Attempts != a.Attempts {
		// Another call acted on the record while the approver was asked: the
		// decision was about an outcome that is no longer the record's.
		if err := h.stillUnknown(c.ctx); err != nil {
			cfg.logger.Warn("retrysafe: could not give back a record after a stale approval", "ref", c.ref, "err", err)
		}
		return waiting(fmt.Sprintf("the outcome of attempt %d is unknown; the approval given was for attempt %d, and one approval allows one attempt", h.rec.Attempts, a.Attempts))
	}
	if a.Decision == Compensate && h.rec.Resolution != nil && h.rec.Resolution.Verdict == verdictCompensationFailed {
		// Another call's compensation of this outcome failed while the
		// approver was asked: it is not tried twice.
		if err := h.stillUnknown(c.ctx); err != nil {
			cfg.logger.Warn("retrysafe: could not give back a record after a failed compensation", "ref", c.ref, "err", err)
		}
		return waiting("a compensation was already tried for this outcome and failed; an operator must settle it")
	}
	if safe := c.t.landsUntil(h.heldUntil); cfg.Now().Before(safe) {
		// The in-flight rule, as for a person's finding of not applied
		// (holding.landed): the approval waits until the attempt can no
		// longer land.
		if err := h.stillUnknown(c.ctx); err != nil {
			cfg.logger.Warn("retrysafe: could not give back a record after an approval given too early", "ref", c.ref, "err", err)
		}
		return c.answer(approverAnswered, answer{reason: reasonApprovalPending, attempts: rec.Attempts, replayed: true, checkAt: safe, now: cfg.Now(),
			why: fmt.Sprintf("the outcome of attempt %d is unknown, and it may still land until %s: the approval given takes effect only then",
				h.rec.Attempts, safe.Format(time.RFC3339))})
	}
	res := &Resolution{By: "approver:" + a.By, Why: a.Reason}
	if a.Decision == RetryOnce {
		// Approved, the record holds the scope's slot until its attempt
		// runs: nothing else of the scope runs beside it.
		res.Verdict = "not applied"
		if err := h.notApplied(c.ctx, res); err != nil {
			return c.storeFailed(err)
		}
		return approvedRetry
	}
	r, err := c.t.compensate(c.ctx, h, c.scope, res)
	if r == reasonSentOtherwise {
		return c.answer(approverAnswered, answer{reason: r, attempts: h.rec.Attempts, other: &h.rec, replayed: true})
	}
	return c.answer(approverAnswered, answer{reason: r, attempts: h.rec.Attempts, err: err})
}

// verdictCompensationFailed marks an unknown record whose compensation was
// tried and failed: it is not tried again for the same outcome.
const verdictCompensationFailed = "compensation failed"

// compensate runs the tool's compensating action for a held unknown record,
// and returns the answer's reason: compensated, or failed (the error says
// why; its success not recorded is logged and returned too).
//
// An action sent otherwise than this definition of the tool sends it
// (definition.go) is not compensated: the compensation would look for it
// by its reference where it never was, find nothing, and call it undone.
// It is given back as it was (reasonSentOtherwise, ErrSentOtherwise).
func (t *Tool) compensate(ctx context.Context, h *holding, scope Scope, res *Resolution) (reason, error) {
	if err := h.sentOtherwise(); err != nil {
		t.cfg.logger.Warn("retrysafe: a compensation of an action sent under another definition of its tool was not run; a person must settle it", "ref", h.rec.Key, "err", err)
		return reasonSentOtherwise, errors.Join(err, h.stillUnknown(ctx))
	}
	info := CallInfo{RequestRef: h.rec.Key, Scope: scope, Token: h.token, Codec: t.cfg.codec}
	err := t.cfg.Compensate(withCallInfo(h.work, info), info)
	if err != nil {
		failed := &Resolution{Verdict: verdictCompensationFailed, By: res.By, Why: err.Error()}
		if rerr := h.finish(ctx, Unknown, nil, failed, false); rerr != nil {
			t.cfg.logger.Warn("retrysafe: could not give back a record after a failed compensation", "ref", h.rec.Key, "err", rerr)
		}
		return reasonCompensationFailed, fmt.Errorf("the compensating action failed: %w", err)
	}
	res.Verdict = "compensated"
	env := t.answerFor(h.rec.Key, answer{reason: reasonCompensated, attempts: h.rec.Attempts})
	if err := h.finish(ctx, Failed, &env, res, false); err != nil {
		t.cfg.logger.Warn("retrysafe: compensation not recorded", "ref", h.rec.Key, "err", err)
		return reasonCompensated, fmt.Errorf("the compensating action succeeded, but it was not recorded: %w", err)
	}
	return reasonCompensated, nil
}
