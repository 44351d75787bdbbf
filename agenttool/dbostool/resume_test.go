package dbostool_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/dbostool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
)

// cancelMidStep starts the workflow id, whose step runs cur's step, waits
// until its tool has acted, cancels the workflow, lets the tool answer,
// and waits until the cancelled execution has returned: the action is
// done (retrysafe recorded it, or is recording it) and DBOS has no
// checkpoint of the step. hold is closed to let the tool answer.
func cancelMidStep(t *testing.T, ctx dbos.Context, wf dbos.Workflow[job, envelope.Envelope], id string, acted <-chan struct{}, hold chan struct{}, returned <-chan error) {
	t.Helper()
	if _, err := dbos.RunWorkflow(ctx, wf, job{User: "tenant-42/user-7", Args: toAna}, dbos.WithWorkflowID(id)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-acted:
	case <-time.After(bound):
		t.Fatal("the tool did not act")
	}
	if err := dbos.CancelWorkflow(ctx, id); err != nil {
		t.Fatal(err)
	}
	close(hold)
	select {
	case err := <-returned:
		if err == nil {
			t.Fatal("the cancelled execution's step answered no error: DBOS recorded it")
		}
	case <-time.After(bound):
		t.Fatal("the cancelled execution did not return")
	}
}

// outage is a store that cannot be reached while down is set — every
// claim and every read is refused: the call answers store_unavailable.
type outage struct {
	agenttool.Store
	down    atomic.Bool
	refused atomic.Int32
}

func (o *outage) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if o.down.Load() {
		o.refused.Add(1)
		return storekit.ClaimResult{}, errOutage
	}
	return o.Store.Claim(ctx, req)
}

func (o *outage) Get(ctx context.Context, key string) (storekit.Record, error) {
	if o.down.Load() {
		return storekit.Record{}, errOutage
	}
	return o.Store.Get(ctx, key)
}

var errOutage = errors.New("outage: the store cannot be reached")

// sendReporting is a workflow that sends one email through s and reports
// on returned what its first execution's Run answered.
func sendReporting(s *dbostool.Step, returned chan<- error) dbos.Workflow[job, envelope.Envelope] {
	var runs atomic.Int32
	return func(ctx dbos.Context, in job) (envelope.Envelope, error) {
		n := runs.Add(1)
		env, err := s.Run(ctx, dbostool.Call{Principal: in.User, Args: in.Args})
		if n == 1 {
			returned <- err
		}
		return env, err
	}
}

// pending reports whether the workflow id has recorded no result yet:
// it runs, or waits in DBOS's queue to run (a resumed workflow is
// enqueued first, and stays so a while on a busy machine).
func pending(t *testing.T, ctx dbos.Context, id string) bool {
	t.Helper()
	h, err := dbos.RetrieveWorkflow[envelope.Envelope](ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := h.GetStatus()
	if err != nil {
		t.Fatal(err)
	}
	return st.Status == dbos.WorkflowStatusPending || st.Status == dbos.WorkflowStatusEnqueued
}

// A step whose action was done, but that DBOS did not checkpoint (the
// workflow was cancelled mid-step; a crash does the same), runs again when
// the workflow is resumed. If retrysafe's store cannot be reached then,
// the call answers store_unavailable — definite_failure, "nothing was done
// by this call, call again" — which DBOS would checkpoint as the step's
// outcome for good: the workflow told the action failed, and never able
// to call again under the same key, although the email was sent. The step
// asks again until the store answers, and its outcome is the action's.
func TestRecoveredStepNeverRecordsDefiniteFailureForADoneAction(t *testing.T) {
	for _, dbosOwns := range []bool{false, true} {
		owner := "tool"
		if dbosOwns {
			owner = "dbos"
		}
		t.Run(owner+" retries", func(t *testing.T) {
			db := newDB(t)
			m := &mailer{db: db, class: agenttool.Reconcilable}
			acted, hold := make(chan struct{}), make(chan struct{})
			var first atomic.Bool
			first.Store(true)
			m.acted = func(string, email) {
				if first.CompareAndSwap(true, false) {
					close(acted)
					<-hold
				}
			}
			var to agenttool.Options
			var so *dbostool.Options
			if dbosOwns {
				to.Retry.MaxAttempts, to.WaitTimeout = 1, 100*time.Millisecond
				so = &dbostool.Options{StepRetries: 2, StepBaseInterval: 50 * time.Millisecond, StepMaxInterval: 250 * time.Millisecond}
			}
			store := &outage{Store: db.store(t, "")}
			s := step(t, m.tool(t, store, to), so)
			returned := make(chan error, 1)
			wf := sendReporting(s, returned)
			ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("send")) })
			cancelMidStep(t, ctx, wf, "store-down-1", acted, hold, returned)

			store.down.Store(true) // the store is down when the step runs again
			h, err := dbos.ResumeWorkflow[envelope.Envelope](ctx, "store-down-1")
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(bound)
			for store.refused.Load() < 3 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if !pending(t, ctx, "store-down-1") {
				env, _ := h.GetResult(dbos.WithHandleTimeout(bound))
				t.Fatalf("the step recorded an outcome while the store was down: %s", asJSON(t, env))
			}
			store.down.Store(false)
			env, err := h.GetResult(dbos.WithHandleTimeout(bound))
			if err != nil {
				t.Fatal(err)
			}
			if n := db.effects(t); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
			if env.Status != envelope.Success {
				t.Errorf("the resumed step's recorded outcome is %s for an action that was done:\n%s", code(env), asJSON(t, env))
			}
		})
	}
}

// The same, with the store up: a workflow cancelled while its tool is
// slow (the destination ignores the cancellation) is resumed at once. The
// resumed step meets the first execution's live claim and, after
// WaitTimeout, answers in_progress ("wait, then call again"), which DBOS
// would checkpoint as the step's outcome for good: unknown_outcome, while
// the action's record ends succeeded — nothing awaiting reconciliation,
// and nothing ever telling the workflow. The step asks again until the
// first call has settled the action, and its outcome is the action's.
func TestResumedStepNeverRecordsInProgress(t *testing.T) {
	db := newDB(t)
	m := &mailer{db: db, class: agenttool.Reconcilable}
	acted, hold := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	slow := make(chan struct{})
	m.acted = func(string, email) {
		if first.CompareAndSwap(true, false) {
			close(acted)
			<-slow // the destination's reply is slow, whatever the context says
		}
	}
	s := step(t, m.tool(t, db.store(t, ""), agenttool.Options{WaitTimeout: 100 * time.Millisecond}), nil)
	returned := make(chan error, 1)
	wf := sendReporting(s, returned)
	ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("send")) })
	if _, err := dbos.RunWorkflow(ctx, wf, job{User: "tenant-42/user-7", Args: toAna}, dbos.WithWorkflowID("slow-1")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-acted:
	case <-time.After(bound):
		t.Fatal("the tool did not act")
	}
	if err := dbos.CancelWorkflow(ctx, "slow-1"); err != nil {
		t.Fatal(err)
	}
	close(hold)
	h, err := dbos.ResumeWorkflow[envelope.Envelope](ctx, "slow-1")
	if err != nil {
		t.Fatal(err)
	}
	// The resumed step meets the live claim for several of its WaitTimeouts.
	time.Sleep(time.Second)
	if !pending(t, ctx, "slow-1") {
		close(slow)
		env, _ := h.GetResult(dbos.WithHandleTimeout(bound))
		t.Fatalf("the step recorded an outcome while another run held its action: %s", asJSON(t, env))
	}
	close(slow)
	env, err := h.GetResult(dbos.WithHandleTimeout(bound))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-returned:
	case <-time.After(bound):
		t.Fatal("the cancelled execution did not return")
	}
	if n := db.effects(t); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if env.Status != envelope.Success {
		t.Errorf("the resumed step's recorded outcome is %s; the action's record went on to succeed:\n%s", code(env), asJSON(t, env))
	}
}
