package temporaltool

import (
	"context"

	"github.com/retrysafe/retrysafe/agenttool"
)

// Decision is a person's decision about an action whose outcome is
// unknown, as it travels in a signal: words, so that a person can send
// one from the command line.
type Decision string

const (
	// RetryOnce: the person confirmed that the effect did not happen;
	// exactly one more attempt may run (agenttool.RetryOnce).
	RetryOnce Decision = "retry_once"
	// Compensate: undo the effect if it happened, with the tool's
	// Compensate function (agenttool.Compensate).
	Compensate Decision = "compensate"
)

// Approval is a person's decision about one unknown outcome, as a
// workflow receives it (by signal or update) and hands it to the activity
// in [Call].Approval. It binds as agenttool's approvals do: RequestRef
// names the action and Attempts the outcome decided on (the envelope's
// request_ref and attempts), so an approval for another action, or for
// an outcome the action has moved past, allows nothing.
type Approval struct {
	RequestRef string   `json:"request_ref"`
	Decision   Decision `json:"decision"`
	By         string   `json:"by"`
	Reason     string   `json:"reason,omitempty"`
	Attempts   int      `json:"attempts"`
}

type approvalKey struct{}

// WorkflowApprover is the Approver of an AtMostOnce tool whose approvals
// come from the workflow: it answers with the [Approval] of the call's
// [Call], when it names the action asked about, and otherwise asks
// Otherwise (nil: undecided, and the model is told to ask a person).
// agenttool then holds the decision to the outcome it was given for
// (Approval.Attempts) and records who gave it. A WorkflowApprover is safe
// for concurrent use.
type WorkflowApprover struct {
	Otherwise agenttool.Approver
}

// Approve implements agenttool.Approver.
func (w WorkflowApprover) Approve(ctx context.Context, req agenttool.ApprovalRequest) (agenttool.Approval, error) {
	if a, ok := ctx.Value(approvalKey{}).(Approval); ok && a.RequestRef == req.RequestRef {
		d := agenttool.Undecided
		switch a.Decision {
		case RetryOnce:
			d = agenttool.RetryOnce
		case Compensate:
			d = agenttool.Compensate
		}
		return agenttool.Approval{Decision: d, By: a.By, Reason: a.Reason, Attempts: a.Attempts}, nil
	}
	if w.Otherwise != nil {
		return w.Otherwise.Approve(ctx, req)
	}
	return agenttool.Approval{Decision: agenttool.Undecided}, nil
}
