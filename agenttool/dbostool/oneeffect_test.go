package dbostool_test

// At most one effect per action, and a recorded outcome that tells the
// truth, when the store fails after the effect and when copies of one
// call run at once. (From a fresh-context review that found no fault.)

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/dbostool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
)

// finishOutage is an outage that begins right after the tool acted: the
// next writes of an outcome (Finish) fail, and from the first, every
// claim and read too.
type finishOutage struct {
	outage
	finishes atomic.Int32 // Finish calls still to fail
}

func (o *finishOutage) Finish(ctx context.Context, req storekit.FinishRequest) error {
	if o.finishes.Add(-1) >= 0 {
		o.down.Store(true)
		o.refused.Add(1)
		return errOutage
	}
	return o.Store.Finish(ctx, req)
}

// The store fails mid-step: the tool has acted (and, for one case, lost
// its reply), and the write of the outcome fails, the store staying down
// for a while. DBOS records the step's outcome for good, so it must not be
// definite_failure (the email went out), nor success for an at-most-once
// action whose reply was lost; and the destination holds one effect, the
// step's outcome naming its action.
func TestOneEffect_StoreDownAfterTheEffectRecordsNoLie(t *testing.T) {
	for _, tc := range []struct {
		class agenttool.Class
		lost  bool // the reply is lost too
		want  envelope.Status
	}{
		{agenttool.Reconcilable, false, envelope.Success},
		{agenttool.Keyed, false, envelope.Success},
		{agenttool.AtMostOnce, false, envelope.Success},
		{agenttool.Reconcilable, true, envelope.Success},
		{agenttool.AtMostOnce, true, envelope.UnknownOutcome},
	} {
		t.Run(fmt.Sprintf("%s/lost=%v", tc.class, tc.lost), func(t *testing.T) {
			db := newDB(t)
			m := &mailer{db: db, class: tc.class}
			if tc.lost {
				m.lost.Store(1)
			}
			store := &finishOutage{outage: outage{Store: db.store(t, "")}}
			store.finishes.Store(1)
			var to agenttool.Options
			to.Retry.MaxAttempts = 1
			s := step(t, m.tool(t, store, to), nil)
			wf := sendOnce(s)
			ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("send")) })
			id := "store-down-" + tc.class.String()
			h, err := dbos.RunWorkflow(ctx, wf, job{User: "tenant-42/user-7", Args: toAna}, dbos.WithWorkflowID(id))
			if err != nil {
				t.Fatal(err)
			}
			// Let the step meet the outage a few times, then bring the store back.
			for deadline := time.Now().Add(20 * time.Second); store.refused.Load() < 3 && time.Now().Before(deadline) && pending(t, ctx, id); {
				time.Sleep(20 * time.Millisecond)
			}
			store.down.Store(false)
			env, err := h.GetResult(dbos.WithHandleTimeout(bound))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the step's recorded outcome: %s", asJSON(t, env))
			if n := db.effects(t); n != 1 {
				t.Errorf("%d effects, want 1", n)
			}
			if env.Status != tc.want {
				t.Errorf("the step recorded %s for an action that was done once (want %s): %s", code(env), tc.want, asJSON(t, env))
			}
			if env.RequestRef == "" {
				t.Errorf("the recorded outcome names no action: %s", asJSON(t, env))
			}
		})
	}
}

// A model put two copies of one call in one message; the workflow runs
// them at once (dbos.Go) under ByInput, and the copy that acts loses its
// reply. Both copies meet one action: one email, and neither copy says
// it failed or that it was done without a check.
func TestOneEffect_ParallelCopiesOfOneActionMeetOneKey(t *testing.T) {
	for _, class := range []agenttool.Class{agenttool.Keyed, agenttool.Reconcilable, agenttool.AtMostOnce} {
		t.Run(class.String(), func(t *testing.T) {
			db := newDB(t)
			m := &mailer{db: db, class: class}
			m.lost.Store(1)
			s := step(t, m.tool(t, db.store(t, ""), agenttool.Options{}), &dbostool.Options{Identity: dbostool.ByInput})
			type two struct{ A, B envelope.Envelope }
			wf := func(ctx dbos.Context, in job) (two, error) {
				c := dbostool.Call{Principal: in.User, Args: in.Args}
				ca, err := s.Go(ctx, c)
				if err != nil {
					return two{}, err
				}
				c.Args = `{"subject":"Invoice 42","to":"ana@example.com"}` // the same call, reordered
				cb, err := s.Go(ctx, c)
				if err != nil {
					return two{}, err
				}
				a, b := <-ca, <-cb
				if a.Err != nil || b.Err != nil {
					return two{}, errors.Join(a.Err, b.Err)
				}
				return two{a.Result, b.Result}, nil
			}
			ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("copies")) })
			h, err := dbos.RunWorkflow(ctx, wf, job{User: "tenant-42/user-7", Args: toAna}, dbos.WithWorkflowID("copies-of-one-action"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := h.GetResult(dbos.WithHandleTimeout(bound))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("copies: %s | %s", asJSON(t, got.A), asJSON(t, got.B))
			if n := db.effects(t); n != 1 {
				t.Errorf("%d effects, want 1", n)
			}
			if got.A.RequestRef != got.B.RequestRef {
				t.Errorf("the copies met two actions: %s, %s", got.A.RequestRef, got.B.RequestRef)
			}
			for _, e := range []envelope.Envelope{got.A, got.B} {
				if e.Status == envelope.DefiniteFailure {
					t.Errorf("a copy recorded definite_failure for a sent email: %s", asJSON(t, e))
				}
				if class == agenttool.AtMostOnce && e.Status == envelope.Success {
					t.Errorf("an at-most-once copy recorded success for an email whose reply was lost: %s", asJSON(t, e))
				}
			}
		})
	}
}
