package dbostool_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/dbostool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/testproc"
)

// The crash helper's environment.
const (
	crashDB    = "DBOSTOOL_CRASH_DB"    // the test's database
	crashClass = "DBOSTOOL_CRASH_CLASS" // the tool's class, as Class.String says it
	crashOwner = "DBOSTOOL_CRASH_OWNER" // "dbos" when DBOS owns the retries
)

var classes = map[string]agenttool.Class{}

func init() {
	for _, c := range []agenttool.Class{agenttool.Keyed, agenttool.Reconcilable, agenttool.AtMostOnce} {
		classes[c.String()] = c
	}
}

// crashJob is the crashed workflow's input, and crashID its ID.
var crashJob = job{User: "tenant-42/user-7", Args: toAna}

const crashID = "crash-1"

// crashSetup builds the mailer and the workflow of the crash test, the same
// in the helper that dies and in the process that recovers: the same
// tool, step and workflow names, so that DBOS recovers the one with the
// other. When DBOS owns the retries, the tool waits little and DBOS's
// retries outwait the dead process's lease.
func crashSetup(t *testing.T, db *testDB, class agenttool.Class, dbosOwns bool, acted func(string, email)) (*mailer, dbos.Workflow[job, envelope.Envelope], func(dbos.Context)) {
	t.Helper()
	m := &mailer{db: db, class: class, acted: acted}
	var to agenttool.Options
	var so dbostool.Options
	if dbosOwns {
		to.Retry.MaxAttempts, to.WaitTimeout = 1, 100*time.Millisecond
		so = dbostool.Options{StepRetries: 20, StepBaseInterval: 50 * time.Millisecond, StepMaxInterval: 250 * time.Millisecond}
	}
	wf := sendOnce(step(t, m.tool(t, db.store(t, ""), to), &so))
	return m, wf, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("send")) }
}

// TestCrashHelper is the process TestCrashAfterEffect kills: it runs the
// workflow, whose tool acts, says so, and waits to be killed before it
// answers. It does nothing in a normal test run.
func TestCrashHelper(t *testing.T) {
	url := os.Getenv(crashDB)
	if url == "" {
		t.Skip("run by TestCrashAfterEffect only")
	}
	_, wf, register := crashSetup(t, openDB(t, url), classes[os.Getenv(crashClass)], os.Getenv(crashOwner) == "dbos", func(ref string, _ email) {
		fmt.Printf("ACTED %s\n", ref)
		os.Stdout.Sync()
		time.Sleep(testproc.Lifetime) // until killed: neither retrysafe nor DBOS recorded the outcome
	})
	ctx := launch(t, url, register)
	h, err := dbos.RunWorkflow(ctx, wf, crashJob, dbos.WithWorkflowID(crashID))
	if err != nil {
		t.Fatal(err)
	}
	h.GetResult(dbos.WithHandleTimeout(testproc.Lifetime))
	t.Fatal("the workflow ended: the helper should have been killed first")
}

// A process is killed after its tool acted and before DBOS recorded the
// step. A new launch on the same database recovers the workflow and runs
// the step again: it meets the same key, outwaits the dead process's
// lease, and settles the action truthfully. One effect, whatever the
// class; success for Keyed (the destination dedupes the reference) and
// Reconcilable (the destination is asked), unknown_outcome for
// AtMostOnce (nothing can ask; nothing runs again).
func TestCrashAfterEffect(t *testing.T) {
	for _, tc := range []struct {
		class    agenttool.Class
		dbosOwns bool
		want     string
		runs     int32 // runs of the tool in the recovering process
	}{
		{agenttool.Keyed, false, "success", 1},
		{agenttool.Keyed, true, "success", 1},
		{agenttool.Reconcilable, false, "success", 0},
		{agenttool.AtMostOnce, false, "unknown_outcome/outcome_unknown", 0},
	} {
		owner := "tool"
		if tc.dbosOwns {
			owner = "dbos"
		}
		t.Run(tc.class.String()+"/"+owner+" retries", func(t *testing.T) {
			db := newDB(t)
			p := testproc.Start(t, "TestCrashHelper", crashDB+"="+db.url, crashClass+"="+tc.class.String(), crashOwner+"="+owner)
			var ref string
			if !p.Until(func(line string) bool {
				r, ok := strings.CutPrefix(line, "ACTED ")
				ref = r
				return ok
			}) {
				p.Wait()
				t.Fatalf("the helper ended before its tool acted:\n%s", p.Stderr)
			}
			p.Kill()
			if n := db.effects(t); n != 1 {
				t.Fatalf("the killed process left %d effects, want 1", n)
			}

			m, _, register := crashSetup(t, db, tc.class, tc.dbosOwns, nil)
			ctx := launch(t, db.url, register) // recovers crash-1
			env, err := result(t, ctx, crashID)
			if err != nil {
				t.Fatal(err)
			}
			if code(env) != tc.want || env.RequestRef != ref {
				t.Errorf("recovery answered %s\nwant %s for the killed step's reference %s", env, tc.want, ref)
			}
			if tc.class == agenttool.Reconcilable && !env.Reconciled {
				t.Errorf("recovery answered %s, want it reconciled", env)
			}
			if n := db.effects(t); n != 1 {
				t.Errorf("%d effects after recovery, want 1", n)
			}
			if n := m.runs.Load(); n != tc.runs {
				t.Errorf("the tool ran %d times in the recovering process, want %d", n, tc.runs)
			}
		})
	}
}
