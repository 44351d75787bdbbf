package main

import (
	"context"
	"fmt"
	"io"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/reconcile"
)

// operatorName is who settles what is left: in your project, the person
// at the admin screen, or "sweeper" for a background job.
const operatorName = "maria"

// settled is what the operator step did about one action.
type settled struct {
	Ref     string
	Tool    string
	Verdict reconcile.Verdict
	State   agenttool.State // the record's state afterwards
}

// settle is the operator's step after the conversation: it lists the
// actions whose outcome is still unknown and asks each destination about
// them (Operator.Reconcile), settling each by the answer. What no
// destination can answer is left for a person, who settles it with
// Operator.ResolveApplied or Operator.ResolveNotApplied, saying who and why.
// In production the sweeper does this in the background
// (Operator.RunSweeper).
func settle(ctx context.Context, w io.Writer, store agenttool.Store, guarded ...*agenttool.Tool) ([]settled, error) {
	op, err := agenttool.NewOperator(store, guarded...)
	if err != nil {
		return nil, err
	}
	unknown, err := op.Unknown(ctx, "", 0)
	if err != nil {
		return nil, fmt.Errorf("listing unknown outcomes: %w", err)
	}
	if len(unknown) == 0 {
		fmt.Fprintln(w, "operator: nothing awaits reconciliation")
		return nil, nil
	}
	if len(unknown) == 1 {
		fmt.Fprintln(w, "operator: 1 action awaits reconciliation")
	} else {
		fmt.Fprintf(w, "operator: %d actions await reconciliation\n", len(unknown))
	}
	var done []settled
	for _, rec := range unknown {
		fmt.Fprintf(w, "operator: %s for %s (%s, %d attempt%s): asking the destination\n", rec.Key, rec.Label, rec.State, rec.Attempts, plural(rec.Attempts))
		verdict, err := op.Reconcile(ctx, rec.Key, operatorName)
		switch {
		case verdict == reconcile.Applied || verdict == reconcile.NotApplied:
		case err != nil:
			fmt.Fprintf(w, "operator: the destination could not be asked (%v): left for a person (ResolveApplied or ResolveNotApplied, with who and why)\n", err)
		default:
			fmt.Fprintf(w, "operator: the destination answers %s: left for a person (ResolveApplied or ResolveNotApplied, with who and why)\n", verdict)
		}
		after, err := op.Show(ctx, rec.Key)
		if err != nil {
			return done, fmt.Errorf("reading %s after settling it: %w", rec.Key, err)
		}
		how := ""
		if r := after.Resolution; r != nil {
			how = fmt.Sprintf(" (%s, by %s)", r.Verdict, r.By)
		}
		fmt.Fprintf(w, "operator: %s is now %s%s\n", rec.Key, after.State, how)
		done = append(done, settled{Ref: rec.Key, Tool: rec.Tool, Verdict: verdict, State: after.State})
	}
	return done, nil
}
