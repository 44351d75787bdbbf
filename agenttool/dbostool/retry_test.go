package dbostool_test

import (
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/dbostool"
)

// Retries have one owner. When the tool owns them, a lost reply is
// retried inside the call, under the same reference, and DBOS runs the
// step once. When DBOS owns them, the tool makes one attempt per call and
// DBOS runs the step again for an envelope that calling again under the
// same key can change — a Keyed tool's lost reply, an unavailable
// destination — and records the last envelope when its retries run out.
// An unknown outcome that calling again cannot settle (a Reconcilable
// destination that cannot say, an AtMostOnce tool) is the step's outcome
// at once. Every case: as many effects as the destination got, never more
// than one.
func TestRetryOwner(t *testing.T) {
	for _, tc := range []struct {
		name     string
		class    agenttool.Class
		dbosOwns bool
		lost     int32 // runs that act and lose their reply
		downs    int32 // runs that fail before acting
		want     string
		calls    int32 // guarded calls: runs of the step
		runs     int32 // runs of the tool's function
		effects  int
	}{
		{"the tool retries a lost reply", agenttool.Keyed, false, 1, 0, "success", 1, 2, 1},
		{"DBOS retries a lost reply of a keyed tool", agenttool.Keyed, true, 1, 0, "success", 2, 2, 1},
		{"DBOS retries an unavailable destination", agenttool.AtMostOnce, true, 0, 1, "success", 2, 2, 1},
		{"DBOS records the last envelope when its retries run out", agenttool.AtMostOnce, true, 0, 10, "definite_failure/unavailable", 3, 3, 0},
		{"a reconcilable unknown outcome is not a step error", agenttool.Reconcilable, true, 1, 0, "unknown_outcome/outcome_unknown", 1, 1, 1},
		{"an at-most-once unknown outcome is not a step error", agenttool.AtMostOnce, true, 1, 0, "unknown_outcome/outcome_unknown", 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB(t)
			m := &mailer{db: db, class: tc.class, silent: true}
			m.lost.Store(tc.lost)
			m.downs.Store(tc.downs)
			var to agenttool.Options
			var so dbostool.Options
			if tc.dbosOwns {
				to.Retry.MaxAttempts = 1
				so = dbostool.Options{StepRetries: 2, StepBaseInterval: 10 * time.Millisecond}
			}
			wf := sendOnce(step(t, m.tool(t, db.store(t, ""), to), &so))
			ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("send")) })
			env := run(t, ctx, wf, job{User: "tenant-42/user-7", Args: toAna}, "retry-1")
			if code(env) != tc.want {
				t.Errorf("the step answered %s, want %s", env, tc.want)
			}
			if c, r, e := m.calls.Load(), m.runs.Load(), db.effects(t); c != tc.calls || r != tc.runs || e != tc.effects {
				t.Errorf("%d calls, %d runs of the tool, %d effects; want %d, %d, %d", c, r, e, tc.calls, tc.runs, tc.effects)
			}
			// What DBOS recorded is what the workflow got.
			again := run(t, ctx, wf, job{User: "tenant-42/user-7", Args: toAna}, "retry-1")
			if asJSON(t, again) != asJSON(t, env) {
				t.Errorf("the recorded step answers\n%s\nwant\n%s", asJSON(t, again), asJSON(t, env))
			}
		})
	}
}
