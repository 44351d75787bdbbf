package opcmd

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/printable"
	"github.com/retrysafe/retrysafe/reconcile"
)

// recordJSON is a record as -json prints it (list and show).
type recordJSON struct {
	Ref           string             `json:"ref"`
	Tool          string             `json:"tool"`
	State         string             `json:"state"`                    // pending, succeeded, failed, unknown
	LeaseLapsed   bool               `json:"lease_lapsed,omitempty"`   // pending, and its holder's lease has lapsed
	RetryApproved bool               `json:"retry_approved,omitempty"` // unknown, and one more attempt is approved
	Attempts      int                `json:"attempts"`
	Label         string             `json:"label,omitempty"`
	Input         string             `json:"input,omitempty"` // the input a tool with KeepInput kept while the action may be unknown
	Created       time.Time          `json:"created"`
	Updated       time.Time          `json:"updated"`
	LeaseExpiry   *time.Time         `json:"lease_expiry,omitempty"` // pending records only
	Expires       *time.Time         `json:"expires,omitempty"`      // when a settled record may be deleted (agenttool.Record.SweepAt)
	Error         string             `json:"error,omitempty"`        // the recorded outcome's error message
	Resolution    *resolutionJSON    `json:"resolution,omitempty"`
	Outcome       *envelope.Envelope `json:"outcome,omitempty"` // show only: the recorded outcome
	// UUID, show only, is the reference's UUID form (agenttool.RefUUID):
	// what a destination that takes UUIDs was given; UUID4, its form with
	// a version 4 UUID's bits (agenttool.RefUUID4), what a destination
	// that takes only those was given.
	UUID  string `json:"uuid,omitempty"`
	UUID4 string `json:"uuid4,omitempty"`
	// Replaces, show only, is the action this one went on in place of
	// (found not applied, and closed as replaced by it), and
	// ReplacesState that action's state now: "succeeded" if it was found
	// applied after all — then this one may be it reworded, and approving
	// this one may do it twice. ReplacedBy is the action that went on in
	// this one's place.
	Replaces      string `json:"replaces,omitempty"`
	ReplacesState string `json:"replaces_state,omitempty"`
	ReplacedBy    string `json:"replaced_by,omitempty"`
	// StandsInForApplied, show only: this action, open, went on in place
	// of an action (Replaces, or one that one replaced) found applied
	// after it went on (agenttool.Record.StandsInForApplied): it may be
	// that action reworded, and approving it may do it twice. The mark
	// stays while this action is open, whether or not the other's record
	// is still kept. StandsFor names that action (empty for a mark made
	// by an earlier version).
	StandsInForApplied bool `json:"stands_in_for_applied,omitempty"`
	// HeldBack: this action was never run — the notice of StandsFor, an
	// action found done after its outcome was unknown, held it back
	// (agenttool.Record.HeldBack) — and its calls are answered
	// earlier_action_applied: it may be that action reworded.
	HeldBack  bool   `json:"held_back,omitempty"`
	StandsFor string `json:"stands_for,omitempty"`
}

type resolutionJSON struct {
	Verdict string    `json:"verdict"`
	By      string    `json:"by"`
	Why     string    `json:"why,omitempty"`
	At      time.Time `json:"at"`
}

// view is what a person is shown of rec: the record, and its decoded
// outcome if it has one (outcomeErr says why not, when it is unreadable).
func (r *runner) view(op *agenttool.Operator, rec agenttool.Record) (v recordJSON, outcomeErr error) {
	v = recordJSON{
		Ref: rec.Key, Tool: rec.Tool, State: rec.State.String(), RetryApproved: rec.RetryApproved,
		Attempts: rec.Attempts, Label: rec.Label, Created: rec.Created, Updated: rec.Updated,
	}
	switch {
	case rec.Input == nil:
	case utf8.Valid(rec.Input):
		v.Input = string(rec.Input)
	default:
		v.Input = "(kept, encrypted: the tool's input codec reads it)"
	}
	if rec.State == agenttool.Pending {
		lease := rec.LeaseExpiry
		v.LeaseExpiry = &lease
		v.LeaseLapsed = !r.opts.Now().Before(lease)
	}
	if expires := rec.SweepAt(); !expires.IsZero() {
		v.Expires = &expires // its lifetime, or its notice or mark if that ends later
	}
	if res := rec.Resolution; res != nil {
		v.Resolution = &resolutionJSON{Verdict: res.Verdict, By: res.By, Why: res.Why, At: res.At}
	}
	if rec.HeldBack() {
		v.HeldBack, v.StandsFor = true, rec.StandsFor
		v.Error = "held back: " + rec.StandsFor + " was found done; not run"
	}
	if len(rec.Outcome) > 0 {
		env, err := op.Outcome(rec)
		if err != nil {
			return v, err
		}
		v.Outcome = &env
		if env.Error != nil {
			v.Error = env.Error.Message
		}
	}
	return v, nil
}

// state is a record's state in a table.
func (v recordJSON) state() string {
	switch {
	case v.LeaseLapsed:
		return v.State + " (lapsed)"
	case v.RetryApproved:
		return v.State + " (retry approved)"
	}
	return v.State
}

func (r *runner) printList(op *agenttool.Operator, recs []agenttool.Record) error {
	if r.json {
		for _, rec := range recs {
			v, err := r.view(op, rec)
			if err != nil {
				v.Error = "(outcome unreadable here: " + err.Error() + ")"
			}
			v.Outcome = nil
			if err := r.emit(v); err != nil {
				return err
			}
		}
		return nil
	}
	if len(recs) == 0 {
		_, err := fmt.Fprintln(r.stdout, "No records await reconciliation.")
		return err
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REFERENCE\tTOOL\tSTATE\tATTEMPTS\tAGE\tLABEL\tLAST ERROR")
	for _, rec := range recs {
		v, err := r.view(op, rec)
		if err != nil {
			v.Error = "(outcome unreadable here)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cell(v.Ref, 0), cell(v.Tool, 0), v.state(), v.Attempts,
			age(r.opts.Now().Sub(v.Updated)), cell(v.Label, 40), cell(v.Error, 100))
	}
	return tw.Flush()
}

// printRecord shows rec, and what it went on in place of (replaced, as
// found now; nil if none or unreadable).
func (r *runner) printRecord(op *agenttool.Operator, rec agenttool.Record, replaced *agenttool.Record) error {
	v, outcomeErr := r.view(op, rec)
	v.UUID, v.UUID4 = agenttool.RefUUID(v.Ref), agenttool.RefUUID4(v.Ref)
	v.Replaces, v.ReplacedBy, v.StandsInForApplied = rec.Replaces, rec.ReplacedBy, rec.StandsInForApplied()
	if v.StandsInForApplied {
		v.StandsFor = rec.StandsFor
	}
	if replaced != nil {
		v.ReplacesState = replaced.State.String()
	}
	if r.json {
		if outcomeErr != nil {
			v.Error = "(outcome unreadable here: " + outcomeErr.Error() + ")"
		}
		return r.emit(v)
	}
	now := r.opts.Now()
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	// Every value passes through cell: what came from a destination, a
	// model or a person is shown, never obeyed, by the terminal.
	row := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", k, cell(fmt.Sprintf(format, args...), 0))
	}
	row("reference", "%s", v.Ref)
	row("as a UUID", "%s", v.UUID)
	row("as a UUID4", "%s", v.UUID4)
	row("tool", "%s", v.Tool)
	row("state", "%s", v.state())
	row("attempts", "%d", v.Attempts)
	row("label", "%s", orNone(cell(v.Label, 0)))
	if v.Input != "" {
		row("input", "%s", cell(v.Input, 0))
	}
	switch {
	case v.Replaces != "" && v.ReplacesState == agenttool.Succeeded.String():
		row("in place of", "%s, found applied after all: if this action is that one reworded, it is done already: do not approve this one", v.Replaces)
	case v.StandsInForApplied:
		was := v.ReplacesState
		if was == "" {
			was = "no longer kept"
		}
		applied := "an action it went on in place of"
		if v.StandsFor != "" {
			applied = "the action it went on in place of, " + v.StandsFor + ","
			if v.StandsFor != v.Replaces {
				applied = "an action it went on in place of, " + v.StandsFor + ","
			}
		}
		row("in place of", "%s (%s); %s was found applied after all: if this action is that one reworded, it is done already: do not approve this one",
			v.Replaces, was, applied)
	case v.Replaces != "" && v.ReplacesState == "":
		row("in place of", "%s (no longer kept)", v.Replaces)
	case v.Replaces != "":
		row("in place of", "%s (%s)", v.Replaces, v.ReplacesState)
	}
	if v.ReplacedBy != "" {
		row("replaced by", "%s", v.ReplacedBy)
	}
	row("created", "%s", when(v.Created, now))
	row("updated", "%s", when(v.Updated, now))
	if v.LeaseExpiry != nil {
		row("lease", "until %s", when(*v.LeaseExpiry, now))
	}
	if v.Expires != nil {
		row("expires", "%s", when(*v.Expires, now))
	}
	if res := v.Resolution; res != nil {
		row("resolution", "%s, by %s, at %s", res.Verdict, res.By, when(res.At, now))
		row("why", "%s", orNone(cell(res.Why, 0)))
	} else {
		row("resolution", "none")
	}
	switch {
	case v.HeldBack:
		row("held back", "%s, whose outcome was unknown, was found done: this was not run, and its calls are answered earlier_action_applied (it may be that action reworded)", v.StandsFor)
	case outcomeErr != nil:
		row("outcome", "unreadable here: %v", outcomeErr)
	case v.Outcome == nil:
		row("outcome", "none recorded yet")
	}
	if err := tw.Flush(); err != nil || v.Outcome == nil {
		return err
	}
	var out strings.Builder
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("  ", "  ")
	if err := enc.Encode(v.Outcome); err != nil {
		return err
	}
	_, err := fmt.Fprintf(r.stdout, "outcome:\n  %s", printable.Text(out.String()))
	return err
}

// countJSON is a line of stats as -json prints it.
type countJSON struct {
	Tool          string `json:"tool"`
	State         string `json:"state"`
	RetryApproved bool   `json:"retry_approved,omitempty"`
	Records       int    `json:"records"`
}

func (r *runner) printStats(counts []storekit.Count) error {
	if r.json {
		for _, c := range counts {
			if err := r.emit(countJSON{Tool: c.Tool, State: c.State.String(), RetryApproved: c.RetryApproved, Records: c.Records}); err != nil {
				return err
			}
		}
		return nil
	}
	if len(counts) == 0 {
		_, err := fmt.Fprintln(r.stdout, "No records.")
		return err
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tSTATE\tRECORDS")
	for _, c := range counts {
		state := c.State.String()
		if c.RetryApproved {
			state += " (retry approved)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\n", cell(c.Tool, 0), state, c.Records)
	}
	return tw.Flush()
}

// settledJSON is the result of reconcile, resolve and approve as -json
// prints it.
type settledJSON struct {
	Ref      string `json:"ref"`
	Verdict  string `json:"verdict"` // applied, not applied, compensated; reconcile: also pending, can't say
	By       string `json:"by,omitempty"`
	Why      string `json:"why,omitempty"`
	Attempts *int   `json:"attempts,omitempty"` // the attempts the finding was about
	Settled  bool   `json:"settled"`            // false: the record stays unknown
}

func (r *runner) printSettled(ref, verdict, by, why string, attempts int, what string) error {
	if r.json {
		s := settledJSON{Ref: ref, Verdict: verdict, By: by, Why: why, Settled: true}
		if attempts >= 0 {
			s.Attempts = &attempts
		}
		return r.emit(s)
	}
	_, err := fmt.Fprintf(r.stdout, "%s: settled as %s by %s: %s.\n", ref, verdict, by, what)
	return err
}

func (r *runner) printVerdict(ref string, v reconcile.Verdict) error {
	settled := v == reconcile.Applied || v == reconcile.NotApplied
	if r.json {
		return r.emit(settledJSON{Ref: ref, Verdict: v.String(), Settled: settled})
	}
	what := "the record stays unknown; ask again later, or settle it with resolve"
	switch v {
	case reconcile.Applied:
		what = "settled as succeeded: calls of this action now replay it"
	case reconcile.NotApplied:
		what = "settled as not applied: the next call of this action runs the tool once more, with the same key"
	}
	_, err := fmt.Fprintf(r.stdout, "%s: the destination answered %s: %s.\n", ref, v, what)
	return err
}

// reportJSON is a sweep report as -json prints it.
type reportJSON struct {
	Progress   bool `json:"progress,omitempty"` // a line printed during the pass, to stderr
	Expired    int  `json:"expired"`
	Checked    int  `json:"checked"`
	Applied    int  `json:"applied"`
	NotApplied int  `json:"not_applied"`
	Unknown    int  `json:"unknown"`
	Skipped    int  `json:"skipped"`
	Errors     int  `json:"errors"`
	Corrupt    int  `json:"corrupt"`
}

func (r *runner) printReport(w io.Writer, rep agenttool.SweepReport, progress bool) error {
	if r.json {
		return emit(w, reportJSON{Progress: progress, Expired: rep.Expired, Checked: rep.Checked, Applied: rep.Applied,
			NotApplied: rep.NotApplied, Unknown: rep.Unknown, Skipped: rep.Skipped, Errors: rep.Errors, Corrupt: rep.Corrupt})
	}
	if progress {
		_, err := fmt.Fprintf(w, "sweeping: checked %d (applied %d, not applied %d, still unknown %d), skipped %d, errors %d, unreadable %d\n",
			rep.Checked, rep.Applied, rep.NotApplied, rep.Unknown, rep.Skipped, rep.Errors, rep.Corrupt)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EXPIRED\tCHECKED\tAPPLIED\tNOT APPLIED\tSTILL UNKNOWN\tSKIPPED\tERRORS\tUNREADABLE")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", rep.Expired, rep.Checked, rep.Applied, rep.NotApplied,
		rep.Unknown, rep.Skipped, rep.Errors, rep.Corrupt)
	return tw.Flush()
}

func (r *runner) emit(v any) error { return emit(r.stdout, v) }

// emit writes v as one line of JSON. Characters a terminal would obey
// (C1 controls, bidi overrides: the encoder escapes only C0) are written
// as JSON escapes of themselves.
func emit(w io.Writer, v any) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := io.WriteString(w, printable.Line(strings.TrimSuffix(b.String(), "\n"))+"\n")
	return err
}

// cell makes s fit a table cell: on one line (a tab or a newline would
// break the table), with every character a terminal would obey rather
// than show made visible (package printable), and at most limit runes if
// limit > 0.
func cell(s string, limit int) string {
	s = printable.Line(s)
	if limit > 0 {
		if rs := []rune(s); len(rs) > limit {
			s = string(rs[:limit-1]) + "…"
		}
	}
	if s == "" {
		return "-"
	}
	return s
}

func orNone(s string) string {
	if s == "-" {
		return "none"
	}
	return s
}

// when prints a time for people: in UTC, with how long ago (or from now).
func when(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	rel := age(d) + " ago"
	if d < 0 {
		rel = "in " + age(-d)
	}
	return t.UTC().Format("2006-01-02 15:04:05Z") + " (" + rel + ")"
}

// age prints a duration the way a listing shows it: 45s, 12m, 3h05m, 2d04h.
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}
