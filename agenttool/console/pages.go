package console

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/internal/printable"
)

// row is one action, as the list and the detail page show it.
type row struct {
	Ref, Tool  string
	Class      string // the tool's class, as people read it
	AtMostOnce bool   // an at-most-once action: nothing runs again without a person
	State      string
	Label      string // what trusted code set with agenttool.WithLabel
	Scope      string // the principal (and session) as the application shows it; "" if unknown here
	Age        string // since the action was first claimed
	Since      string // when, in UTC
	Attempts   int
	LastAnswer string // what the destination last answered, from the outcome's error
	Asked      string // how often the agent asked for a decision on this outcome (Approvals): "once", "3 times"
	First      bool   // sorts first: an unknown at-most-once action
	created    time.Time
}

// row describes one record the viewer sees through v.
func (h *Handler) row(rec agenttool.Record, v view, now time.Time) row {
	info, known := h.opts.Operator.Tool(rec.Tool)
	r := row{
		Ref: rec.Key, Tool: rec.Tool, Class: "a tool this console was not given", State: stateOf(rec, now),
		Label: rec.Label, Attempts: rec.Attempts, created: rec.Created,
		Age: age(now.Sub(rec.Created)), Since: rec.Created.UTC().Format(time.RFC3339),
		LastAnswer: h.lastAnswer(rec),
	}
	if known {
		r.Class = info.Class.String()
	}
	r.AtMostOnce = info.Class == agenttool.AtMostOnce
	r.First = r.AtMostOnce && rec.State == agenttool.Unknown
	scope := agenttool.Scope{Principal: v.principal}
	// What the agent's call said when it asked, joined by reference only
	// to a record the viewer already sees, and only when it names the
	// principal seen through.
	if x, ok := h.opts.Approvals.lookup(rec.Key); ok && (v.principal == "" || x.req.Scope.Principal == v.principal) {
		scope = x.req.Scope
		if x.req.Attempts == rec.Attempts {
			r.Asked = times(x.times)
		}
		if r.Label == "" {
			r.Label = x.req.Label
		}
	}
	if scope.Principal != "" {
		r.Scope = h.opts.ShowScope(scope)
	}
	return r
}

func stateOf(rec agenttool.Record, now time.Time) string {
	switch {
	case rec.HeldBack():
		return "held back: not run"
	case rec.State == agenttool.Unknown && rec.RetryApproved:
		return "approved for one more attempt"
	case rec.State == agenttool.Pending && !now.Before(rec.LeaseExpiry):
		return "pending, its holder stopped"
	case rec.State == agenttool.Pending:
		return "running"
	}
	return rec.State.String()
}

// lastAnswer says what the record's outcome says: for an unknown action,
// what went wrong and what the destination last answered.
func (h *Handler) lastAnswer(rec agenttool.Record) string {
	if rec.HeldBack() {
		return "earlier_action_applied: " + rec.StandsFor + ", whose outcome was unknown, was found done; this was not run, and its input never runs"
	}
	env, err := h.opts.Operator.Outcome(rec)
	switch {
	case err != nil && rec.State == agenttool.Pending:
		return "none recorded: the call that holds it has not recorded an outcome"
	case err != nil:
		return "unreadable: " + err.Error()
	case env.Error != nil:
		return env.Error.Message
	}
	return string(env.Status)
}

func times(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

// age says how long ago something was, to the minute.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "under a minute"
	case d < time.Hour:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", d/time.Hour, d%time.Hour/time.Minute)
	}
	return fmt.Sprintf("%d days", d/(24*time.Hour))
}

type listPage struct {
	Viewer     string
	Sees       string
	Rows       []row
	Full       bool
	Limit      int
	Unreadable []string
}

// list serves the actions awaiting a decision: unknown at-most-once
// actions first, then the others; the oldest first in each group.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	a, ok := h.who(w, r)
	if !ok {
		return
	}
	recs, full, unreadable, err := a.awaiting(r.Context(), h.opts.Limit)
	if err != nil {
		h.opts.Logger.Error("retrysafe console: listing failed", "viewer", a.viewer.Name, "err", err)
		plain(w, http.StatusInternalServerError, "the store could not be read; try again")
		return
	}
	now := h.opts.Now()
	p := listPage{Viewer: a.viewer.Name, Sees: sees(a.viewer), Full: full, Limit: h.opts.Limit, Unreadable: unreadable}
	for _, s := range recs {
		p.Rows = append(p.Rows, h.row(s.rec, s.view, now))
	}
	slices.SortFunc(p.Rows, func(x, y row) int {
		if x.First != y.First {
			if x.First {
				return -1
			}
			return 1
		}
		return cmp.Or(x.created.Compare(y.created), strings.Compare(x.Ref, y.Ref))
	})
	h.render(w, http.StatusOK, "list", p)
}

func sees(v Viewer) string {
	switch {
	case v.All:
		return "every principal's actions"
	case len(v.Principals) == 1:
		return "the actions of one principal"
	}
	return fmt.Sprintf("the actions of %d principals", len(v.Principals))
}

// detailPage is one action, with what the viewer may do about it.
type detailPage struct {
	Viewer      string
	Row         row
	Created     string
	Updated     string
	LeaseExpiry string // for a pending record
	Resolution  string // the last settlement, or ""
	// InPlaceOf is the action this one went on in place of (found not
	// applied, and closed as replaced by it); InPlaceOfApplied, whether
	// it, or one it replaced, was found applied after all: this one may be
	// it reworded (agenttool.Record.StandsFor, or its record);
	// AppliedBefore, the action found applied when it is not InPlaceOf
	// but one before it (agenttool.Record.StandsFor), and
	// AppliedUnnamed, that one of them was, the mark (made by an earlier
	// version) naming none.
	InPlaceOf        string
	InPlaceOfApplied bool
	AppliedBefore    string
	AppliedUnnamed   bool
	Awaiting         bool // a decision can be made now
	Can              struct{ Reconcile, Applied, NotApplied, Retry, Compensate bool }
	CSRF             string
	Done             string // what the last decision did
	Problem          string // why the last decision was refused
	Did              string // the refused decision, whose form keeps what was typed:
	Reason           string // the reason
	Result           string // and the result
}

func (h *Handler) detail(w http.ResponseWriter, r *http.Request) {
	a, ok := h.who(w, r)
	if !ok {
		return
	}
	ref := r.URL.Query().Get("ref")
	rec, v, err := a.find(r.Context(), ref)
	if err != nil {
		h.notVisible(w, a, ref, err)
		return
	}
	p := h.detailOf(r.Context(), a, rec, v)
	if done := r.URL.Query().Get("done"); stillTrue(done, rec) {
		p.Done = doneMessages[done]
	}
	h.render(w, http.StatusOK, "detail", p)
}

// stillTrue reports whether the record is still as the decision named by
// done left it: the "done" parameter is a link anyone can write, or an old
// redirect reloaded after the action moved on, so its message is shown
// only when the record bears it out.
func stillTrue(done string, rec agenttool.Record) bool {
	verdict := ""
	if rec.Resolution != nil {
		verdict = rec.Resolution.Verdict
	}
	approved := rec.State == agenttool.Unknown && rec.RetryApproved
	switch done {
	case doApplied, "reconcile-applied":
		return rec.State == agenttool.Succeeded && verdict == "applied"
	case doNotApplied, doRetry, "reconcile-not-applied":
		return approved && verdict == "not applied"
	case doCompensate:
		return rec.State == agenttool.Failed && verdict == "compensated"
	case "reconcile-pending", "reconcile-cant-say":
		return rec.State == agenttool.Unknown && !rec.RetryApproved
	}
	return false
}

// notVisible answers for a reference the viewer cannot see, or a store
// that could not be read.
func (h *Handler) notVisible(w http.ResponseWriter, a *access, ref string, err error) {
	if err == errHidden {
		plain(w, http.StatusNotFound, errHidden.Error())
		return
	}
	h.opts.Logger.Error("retrysafe console: reading an action failed", "viewer", a.viewer.Name, "ref", printable.Line(ref), "err", errText(err))
	plain(w, http.StatusInternalServerError, "the store could not be read; try again")
}

func (h *Handler) detailOf(ctx context.Context, a *access, rec agenttool.Record, v view) detailPage {
	now := h.opts.Now()
	info, known := h.opts.Operator.Tool(rec.Tool)
	p := detailPage{
		Viewer: a.viewer.Name, Row: h.row(rec, v, now), CSRF: h.token(a.viewer),
		Created: rec.Created.UTC().Format(time.RFC3339), Updated: rec.Updated.UTC().Format(time.RFC3339),
		Awaiting: rec.AwaitsReconciliation(now),
	}
	if rec.State == agenttool.Pending {
		p.LeaseExpiry = rec.LeaseExpiry.UTC().Format(time.RFC3339)
	}
	if rec.Replaces != "" {
		p.InPlaceOf = rec.Replaces
		switch {
		case !rec.StandsInForApplied():
		case rec.StandsFor == rec.Replaces:
			p.InPlaceOfApplied = true
		case rec.StandsFor != "":
			p.AppliedBefore = rec.StandsFor
		default:
			p.AppliedUnnamed = true
		}
		if was, _, err := a.find(ctx, rec.Replaces); err == nil && was.State == agenttool.Succeeded {
			p.InPlaceOfApplied, p.AppliedBefore, p.AppliedUnnamed = true, "", false
		}
	}
	if res := rec.Resolution; res != nil {
		p.Resolution = fmt.Sprintf("%s, by %s, %s", res.Verdict, res.By, res.At.UTC().Format(time.RFC3339))
		if res.Why != "" {
			p.Resolution += ": " + res.Why
		}
	}
	if p.Awaiting {
		p.Can.Reconcile = info.Reconciles
		p.Can.Applied = true
		p.Can.NotApplied = true
		p.Can.Retry = info.Class == agenttool.AtMostOnce || !known
		p.Can.Compensate = info.Compensates
	}
	return p
}

func (h *Handler) render(w http.ResponseWriter, status int, name string, data any) {
	var b bytes.Buffer
	if err := h.pages.ExecuteTemplate(&b, name, data); err != nil {
		h.opts.Logger.Error("retrysafe console: rendering failed", "page", name, "err", err)
		plain(w, http.StatusInternalServerError, "the page could not be rendered")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	// What a destination, a model or a person wrote is shown, never
	// obeyed: control characters and bidi overrides become visible escapes
	// (package printable), wherever on the page they are.
	io.WriteString(w, printable.Text(b.String()))
}
