package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/internal/printable"
	"github.com/retrysafe/retrysafe/reconcile"
)

// The decisions a form can ask for, by the value of its "do" field.
const (
	doReconcile  = "reconcile"
	doApplied    = "applied"
	doNotApplied = "not-applied"
	doRetry      = "retry"
	doCompensate = "compensate"
)

// doneMessages say what a decision did, by the "done" parameter of the
// page a decision redirects to. Nothing else from that parameter is shown.
var doneMessages = map[string]string{
	doApplied:               "Resolved as applied: later calls for this action replay it as a success; nothing runs again.",
	doNotApplied:            "Resolved as not applied: the next call for this action runs the tool once more, with the same key.",
	doRetry:                 "One retry approved: the next call for this action runs the tool exactly once, with the same key.",
	doCompensate:            "Compensated: the tool's compensating action ran, and the action is closed as not applied.",
	"reconcile-applied":     "The destination answered applied: the action is settled as a success.",
	"reconcile-not-applied": "The destination answered not applied: the next call for this action runs the tool once more, with the same key.",
	"reconcile-pending":     "The destination answered pending: the action stays unknown.",
	"reconcile-cant-say":    "The destination could not say: the action stays unknown.",
}

// reconciled names a destination's answer in doneMessages.
var reconciled = map[reconcile.Verdict]string{
	reconcile.Applied:    "reconcile-applied",
	reconcile.NotApplied: "reconcile-not-applied",
	reconcile.Pending:    "reconcile-pending",
	reconcile.CantSay:    "reconcile-cant-say",
}

// maxReason bounds a reason, in characters; maxForm a whole form, in bytes.
const (
	maxReason = 2000
	maxForm   = 64 << 10
)

// act makes one decision. Every decision is a POST whose form carries the
// viewer's token (see token); it names the reference, the attempts the
// page showed, and why.
func (h *Handler) act(w http.ResponseWriter, r *http.Request) {
	a, ok := h.who(w, r)
	if !ok {
		return
	}
	if err := h.origin.Check(r); err != nil {
		h.opts.Logger.Warn("retrysafe console: cross-origin decision refused", "viewer", printable.Line(a.viewer.Name), "err", err)
		plain(w, http.StatusForbidden, "a decision must come from the console's own page; this request came from another site")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		plain(w, http.StatusBadRequest, "the form could not be read")
		return
	}
	form := r.PostForm // never the URL's query: a link cannot carry a decision
	if !h.validToken(a.viewer, form.Get("csrf")) {
		h.opts.Logger.Warn("retrysafe console: decision with a missing or wrong form token refused", "viewer", printable.Line(a.viewer.Name), "ref", printable.Line(form.Get("ref")))
		plain(w, http.StatusForbidden, "the form's token is missing or wrong, so nothing was changed. Open the console again and decide from its page")
		return
	}
	ref, do := form.Get("ref"), form.Get("do")
	rec, v, err := a.find(r.Context(), ref)
	if err != nil {
		h.notVisible(w, a, ref, err)
		return
	}
	d := decision{
		do: do, ref: ref, by: a.viewer.Name, reason: strings.TrimSpace(form.Get("reason")),
		result: strings.TrimSpace(form.Get("result")),
	}
	page := h.detailOf(r.Context(), a, rec, v)
	page.Did, page.Reason, page.Result = do, d.reason, d.result
	refuse := func(status int, msg string) {
		page.Problem = msg
		h.render(w, status, "detail", page)
	}
	switch do {
	case doReconcile, doApplied, doNotApplied, doRetry, doCompensate:
	default:
		refuse(http.StatusBadRequest, "Nothing was changed: the form asked for no decision this console knows.")
		return
	}
	if d.reason == "" || utf8.RuneCountInString(d.reason) > maxReason {
		refuse(http.StatusBadRequest, fmt.Sprintf("Nothing was changed: say why (a reason of at most %d characters is required; it is recorded with your name).", maxReason))
		return
	}
	if d.result != "" && !json.Valid([]byte(d.result)) {
		refuse(http.StatusBadRequest, "Nothing was changed: the result is not valid JSON.")
		return
	}
	if d.attempts, err = strconv.Atoi(form.Get("attempts")); err != nil {
		refuse(http.StatusBadRequest, "Nothing was changed: the form does not say which attempt it decides on.")
		return
	}
	if !page.Awaiting {
		refuse(http.StatusConflict, fmt.Sprintf("Nothing was changed: this action is no longer awaiting a decision (it is %s).", page.Row.State))
		return
	}
	// The decision is about the outcome the page showed: the operator
	// checks it again while it holds the record; this answers early.
	if d.attempts != rec.Attempts {
		refuse(http.StatusConflict, stale(d.attempts, rec.Attempts))
		return
	}
	done, err := d.make(r.Context(), v.op)
	h.opts.Logger.Info("retrysafe console: decision", "viewer", printable.Line(d.by), "decision", do, "ref", ref,
		"attempts", d.attempts, "why", printable.Line(d.reason), "done", done, "err", errText(err))
	if err != nil {
		// Show the action as it is now.
		if now, _, ferr := a.find(r.Context(), ref); ferr == nil {
			page = h.detailOf(r.Context(), a, now, v)
			page.Did, page.Reason, page.Result = do, d.reason, d.result
			rec = now
		}
		status, msg := refusal(err, d.attempts, rec.Attempts)
		refuse(status, msg)
		return
	}
	if done != reconciled[reconcile.Pending] && done != reconciled[reconcile.CantSay] {
		h.opts.Approvals.forget(ref) // settled
	}
	// See the action as it now is, by a GET that can be reloaded.
	w.Header().Set("Location", "action?ref="+url.QueryEscape(ref)+"&done="+done)
	w.WriteHeader(http.StatusSeeOther)
}

// decision is one person's decision about one action.
type decision struct {
	do, ref, by, reason, result string
	attempts                    int
}

// make carries the decision out through op, the operator the viewer sees
// the action through, and says what it did (a key of doneMessages).
func (d decision) make(ctx context.Context, op *agenttool.Operator) (string, error) {
	switch d.do {
	case doReconcile:
		// The record keeps the destination's answer and who asked;
		// the reason goes to the audit log.
		v, err := op.Reconcile(ctx, d.ref, d.by)
		if err != nil {
			return "", err
		}
		return reconciled[v], nil
	case doApplied:
		var result json.RawMessage
		if d.result != "" {
			result = json.RawMessage(d.result)
		}
		return d.do, op.ResolveApplied(ctx, d.ref, d.attempts, result, d.by, d.reason)
	case doNotApplied:
		return d.do, op.ResolveNotApplied(ctx, d.ref, d.attempts, d.by, d.reason)
	case doRetry:
		return d.do, op.ResolveNotApplied(ctx, d.ref, d.attempts, d.by, "one retry approved: "+d.reason)
	case doCompensate:
		return d.do, op.Compensate(ctx, d.ref, d.attempts, d.by, d.reason)
	}
	return "", fmt.Errorf("no decision %q: %w", d.do, agenttool.ErrInvalidRequest)
}

func stale(decided, now int) string {
	return fmt.Sprintf("Nothing was changed: this decision was about attempt %d, and the action is now at attempt %d — "+
		"another attempt ran after the page was shown. Look at the action again before you decide.", decided, now)
}

// refusal says, for a decision the operator refused, what people read.
func refusal(err error, decided, now int) (int, string) {
	switch {
	case errors.Is(err, agenttool.ErrStale):
		return http.StatusConflict, stale(decided, now)
	case errors.Is(err, agenttool.ErrBusy):
		return http.StatusConflict, "Nothing was changed: a call or a check holds this action right now. Try again in a moment."
	case errors.Is(err, agenttool.ErrNotUnknown):
		return http.StatusConflict, "Nothing was changed: this action was settled meanwhile; its state is shown above."
	case errors.Is(err, agenttool.ErrInFlight):
		return http.StatusConflict, "Nothing was changed: its last attempt may still reach the destination, which would not show it yet. " + err.Error()
	case errors.Is(err, agenttool.ErrNotFound):
		return http.StatusNotFound, "Nothing was changed: " + errHidden.Error() + "."
	case errors.Is(err, agenttool.ErrInvalidRequest):
		return http.StatusBadRequest, "Nothing was changed: " + err.Error()
	}
	return http.StatusBadGateway, "The decision did not complete: " + err.Error()
}
