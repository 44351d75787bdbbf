package dbostool_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/dbostool"
	"github.com/retrysafe/retrysafe/envelope"
)

// A step DBOS recorded is replayed from its checkpoint when DBOS recovers
// the workflow: the same envelope, without calling the tool (nor the
// guard: it is not a replay from retrysafe's store). A workflow started
// again under its ID returns its recorded result.
func TestCompletedStepReplaysFromDBOS(t *testing.T) {
	db := newDB(t)
	m := &mailer{db: db, class: agenttool.Keyed}
	s := step(t, m.tool(t, db.store(t, ""), agenttool.Options{}), nil)

	var hold atomic.Bool
	hold.Store(true)
	first := make(chan envelope.Envelope, 1)
	wf := func(ctx dbos.Context, in job) (envelope.Envelope, error) {
		env, err := s.Run(ctx, dbostool.Call{Principal: in.User, Args: in.Args})
		if err != nil || !hold.Load() {
			return env, err
		}
		// The first execution stops here, after the step, until DBOS is
		// shut down: the workflow stays pending, for the next launch.
		first <- env
		<-ctx.Done()
		return env, ctx.Err()
	}
	register := func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("send")) }

	ctx := launch(t, db.url, register)
	if _, err := dbos.RunWorkflow(ctx, wf, job{User: "tenant-42/user-7", Args: toAna}, dbos.WithWorkflowID("replay-1")); err != nil {
		t.Fatal(err)
	}
	var want envelope.Envelope
	select {
	case want = <-first:
	case <-time.After(bound):
		t.Fatal("the workflow did not reach its step")
	}
	if want.Status != envelope.Success {
		t.Fatalf("first execution answered %s", want)
	}
	if err := dbos.Shutdown(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	hold.Store(false)
	ctx = launch(t, db.url, register) // recovers replay-1
	got, err := result(t, ctx, "replay-1")
	if err != nil {
		t.Fatal(err)
	}
	if asJSON(t, got) != asJSON(t, want) {
		t.Errorf("recovery answered\n%s\nwant the recorded\n%s", asJSON(t, got), asJSON(t, want))
	}
	if n := m.calls.Load(); n != 1 {
		t.Errorf("the guarded tool was called %d times, want 1: DBOS's checkpoint answers a recorded step", n)
	}

	again := run(t, ctx, wf, job{User: "tenant-42/user-7", Args: toAna}, "replay-1")
	if asJSON(t, again) != asJSON(t, want) {
		t.Errorf("the workflow's ID reused answered\n%s\nwant its recorded result\n%s", asJSON(t, again), asJSON(t, want))
	}
	if n, e := m.calls.Load(), db.effects(t); n != 1 || e != 1 {
		t.Errorf("after the ID was reused: %d calls, %d effects; want 1 and 1", n, e)
	}
}

// A fork is a new workflow (a new ID) that runs its steps from StartStep
// again. Under ByStep its steps are new actions and act again: forking is
// how a workflow is told to do it again. Under ByInput with the
// conversation carried in the workflow's input, the fork meets the
// actions it copies and replays them.
func TestForkWorkflow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		identity dbostool.Identity
		session  string
		effects  int
		replayed bool
	}{
		{"by step acts again", dbostool.ByStep, "", 2, false},
		{"by input in the conversation replays", dbostool.ByInput, "conversation-9", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB(t)
			m := &mailer{db: db, class: agenttool.Keyed}
			s := step(t, m.tool(t, db.store(t, ""), agenttool.Options{}), &dbostool.Options{Identity: tc.identity})
			wf := sendOnce(s)
			ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("send")) })
			orig := run(t, ctx, wf, job{User: "tenant-42/user-7", Args: toAna, Session: tc.session}, "fork-orig")

			h, err := dbos.ForkWorkflow[envelope.Envelope](ctx, dbos.ForkWorkflowInput{OriginalWorkflowID: "fork-orig", StartStep: 0})
			if err != nil {
				t.Fatal(err)
			}
			forked, err := h.GetResult(dbos.WithHandleTimeout(bound))
			if err != nil {
				t.Fatal(err)
			}
			if orig.Status != envelope.Success || forked.Status != envelope.Success || forked.Replayed != tc.replayed {
				t.Errorf("original %s, fork %s; want success, and a fork replayed=%v", orig, forked, tc.replayed)
			}
			if same := forked.RequestRef == orig.RequestRef; same != tc.replayed {
				t.Errorf("the fork's reference %s, the original's %s: same=%v, want %v", forked.RequestRef, orig.RequestRef, same, tc.replayed)
			}
			if n := db.effects(t); n != tc.effects {
				t.Errorf("%d effects, want %d", n, tc.effects)
			}
		})
	}
}
