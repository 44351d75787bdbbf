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
	"github.com/retrysafe/retrysafe/envelope"
)

// trio is what a workflow of three calls answers.
type trio struct {
	A, B, C envelope.Envelope
}

// Two steps of one tool started at once in one workflow (dbos.Go) run at
// once under ByStep: the first waits, inside its tool, until the second
// has acted, which a tool that ran one write at a time per workflow would
// never let happen. The first then loses its reply and ends unknown; a
// third step of the same tool still runs: one unknown action holds up
// only itself.
func TestParallelStepsRunAtOnce(t *testing.T) {
	db := newDB(t)
	m := &mailer{db: db, class: agenttool.Reconcilable, silent: true}
	betoActed := make(chan struct{})
	m.before = func(ctx context.Context, in email) error {
		if in.To != "ana@example.com" {
			return nil
		}
		select {
		case <-betoActed:
			return errLostReply // without acting: nobody can say
		case <-time.After(testWait + time.Second):
			return envelope.MarkDefinite(errors.New("beto's step did not run while ana's ran"), "serialised")
		}
	}
	m.acted = func(_ string, in email) {
		if in.To == "beto@example.com" {
			close(betoActed)
		}
	}
	s := step(t, m.tool(t, db.store(t, ""), agenttool.Options{}), nil)
	wf := func(ctx dbos.Context, user string) (trio, error) {
		a, err := s.Go(ctx, dbostool.Call{Principal: user, Args: toAna})
		if err != nil {
			return trio{}, err
		}
		b, err := s.Go(ctx, dbostool.Call{Principal: user, Args: toBeto})
		if err != nil {
			return trio{}, err
		}
		oa, ob := <-a, <-b
		if err := errors.Join(oa.Err, ob.Err); err != nil {
			return trio{}, err
		}
		c, err := s.Run(ctx, dbostool.Call{Principal: user, Args: toCaio})
		return trio{oa.Result, ob.Result, c}, err
	}
	ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("fan-out")) })
	h, err := dbos.RunWorkflow(ctx, wf, "tenant-42/user-7")
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.GetResult(dbos.WithHandleTimeout(bound))
	if err != nil {
		t.Fatal(err)
	}
	if code(got.A) != "unknown_outcome/outcome_unknown" || code(got.B) != "success" || code(got.C) != "success" {
		t.Errorf("the steps answered\n%s\n%s\n%s\nwant unknown_outcome (ana), success (beto), success (caio)", got.A, got.B, got.C)
	}
	if n := db.effects(t); n != 2 {
		t.Errorf("%d effects, want 2 (beto, caio)", n)
	}
}

// What makes an action decides what a model's repeat in a later step
// meets. In a workflow that calls the tool for ana (the reply is lost and
// nobody can say whether she got it), then for caio, then for ana again:
// under ByInput the repeat meets ana's unknown action (same reference)
// and caio's call is held by the unknown fence of the conversation;
// under ByStep each step is an action of its own: caio's runs, and so
// does the repeat, under a new reference — which is why calls a model
// proposes want ByInput.
func TestIdentityDecidesWhatARepeatMeets(t *testing.T) {
	for _, tc := range []struct {
		identity      dbostool.Identity
		caio, repeat  string
		sameReference bool
		effects       int
	}{
		{dbostool.ByInput, "unknown_outcome/earlier_action_unknown", "unknown_outcome/outcome_unknown", true, 0},
		{dbostool.ByStep, "success", "success", false, 2},
	} {
		t.Run(tc.identity.String(), func(t *testing.T) {
			db := newDB(t)
			m := &mailer{db: db, class: agenttool.Reconcilable, silent: true}
			var first atomic.Bool
			m.before = func(_ context.Context, in email) error {
				if in.To == "ana@example.com" && first.CompareAndSwap(false, true) {
					return errLostReply // without acting: nobody can say
				}
				return nil
			}
			s := step(t, m.tool(t, db.store(t, ""), agenttool.Options{}), &dbostool.Options{Identity: tc.identity})
			wf := func(ctx dbos.Context, user string) (trio, error) {
				var got trio
				for i, args := range []string{toAna, toCaio, toAna} {
					env, err := s.Run(ctx, dbostool.Call{Principal: user, Args: args})
					if err != nil {
						return got, err
					}
					*[]*envelope.Envelope{&got.A, &got.B, &got.C}[i] = env
				}
				return got, nil
			}
			ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("agent")) })
			h, err := dbos.RunWorkflow(ctx, wf, "tenant-42/user-7")
			if err != nil {
				t.Fatal(err)
			}
			got, err := h.GetResult(dbos.WithHandleTimeout(bound))
			if err != nil {
				t.Fatal(err)
			}
			if code(got.A) != "unknown_outcome/outcome_unknown" || code(got.B) != tc.caio || code(got.C) != tc.repeat {
				t.Errorf("the steps answered\n%s\n%s\n%s\nwant unknown_outcome/outcome_unknown, %s, %s", got.A, got.B, got.C, tc.caio, tc.repeat)
			}
			if same := got.C.RequestRef == got.A.RequestRef; same != tc.sameReference {
				t.Errorf("the repeat's reference %s, the first's %s: same=%v, want %v", got.C.RequestRef, got.A.RequestRef, same, tc.sameReference)
			}
			if n := db.effects(t); n != tc.effects {
				t.Errorf("%d effects, want %d", n, tc.effects)
			}
		})
	}
}

// Under ByStep, a Call's Step names the action across the workflow's
// steps: a later step with the same Step meets the same key (and
// replays what the first did), a step with another Step is another
// action.
func TestActionNamesOneActionAcrossSteps(t *testing.T) {
	db := newDB(t)
	m := &mailer{db: db, class: agenttool.Keyed}
	s := step(t, m.tool(t, db.store(t, ""), agenttool.Options{}), nil)
	wf := func(ctx dbos.Context, user string) (trio, error) {
		var got trio
		for i, action := range []string{"invoice-42", "invoice-42", "invoice-42-reminder"} {
			env, err := s.Run(ctx, dbostool.Call{Principal: user, Args: toAna, Step: action})
			if err != nil {
				return got, err
			}
			*[]*envelope.Envelope{&got.A, &got.B, &got.C}[i] = env
		}
		return got, nil
	}
	ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("named")) })
	h, err := dbos.RunWorkflow(ctx, wf, "tenant-42/user-7")
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.GetResult(dbos.WithHandleTimeout(bound))
	if err != nil {
		t.Fatal(err)
	}
	if code(got.A) != "success" || got.A.Replayed || code(got.B) != "success" || !got.B.Replayed || got.B.RequestRef != got.A.RequestRef {
		t.Errorf("the same Step answered\n%s\n%s\nwant a success, then its replay under the same reference", got.A, got.B)
	}
	if code(got.C) != "success" || got.C.Replayed || got.C.RequestRef == got.A.RequestRef {
		t.Errorf("another Step answered %s, want a success of its own", got.C)
	}
	if n := db.effects(t); n != 2 {
		t.Errorf("%d effects, want 2", n)
	}
}

// The envelope tells whoever reads it — the model the workflow hands it
// to — what calling again does. A Keyed tool whose every attempt lost its
// reply answers unknown_outcome with next "wait" and "calling send_email
// again later with the same input is safe: reference … makes the
// destination do it at most once". Under ByStep (the default) that is not
// so: the same input in a later step is another action under another
// reference, and the destination does it again. Either the guidance holds
// (one effect), or the envelope must not give it.
func TestByStepWaitGuidanceHolds(t *testing.T) {
	db := newDB(t)
	m := &mailer{db: db, class: agenttool.Keyed}
	m.lost.Store(3) // every attempt of the first call acts and loses its reply
	s := step(t, m.tool(t, db.store(t, ""), agenttool.Options{}), nil)
	wf := func(ctx dbos.Context, user string) (trio, error) {
		var got trio
		first, err := s.Run(ctx, dbostool.Call{Principal: user, Args: toAna})
		if err != nil || first.Next != envelope.Wait {
			return trio{A: first}, err
		}
		// The model does what the envelope says: later, the same input.
		got.A = first
		got.B, err = s.Run(ctx, dbostool.Call{Principal: user, Args: toAna})
		return got, err
	}
	ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("agent")) })
	h, err := dbos.RunWorkflow(ctx, wf, "tenant-42/user-7")
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.GetResult(dbos.WithHandleTimeout(bound))
	if err != nil {
		t.Fatal(err)
	}
	if code(got.A) != "unknown_outcome/outcome_unknown" {
		t.Fatalf("the first step answered %s, want unknown_outcome", got.A)
	}
	if n := db.effects(t); n != 1 {
		t.Errorf("%d effects: the first step's envelope said\n  next=%s: %q\nand the same input again made another action (%s, then %s)",
			n, got.A.Next, got.A.Note, got.A.RequestRef, got.B.RequestRef)
	}
}

// Under ByStep two calls are two actions, "even with the same input — what
// a workflow that decides to send two reminders means". Run called from
// inside a step of the workflow's own (DBOS runs a nested RunAsStep as a
// plain call) reads the enclosing step's ID for both calls: the two
// reminders meet one key, the second is a replay of the first, and both
// answer success while one email went out. Run must either make them two
// actions or refuse the nesting.
func TestByStepTwoCallsInsideOneStepAreTwoActions(t *testing.T) {
	db := newDB(t)
	m := &mailer{db: db, class: agenttool.Keyed}
	s := step(t, m.tool(t, db.store(t, ""), agenttool.Options{}), nil)
	wf := func(ctx dbos.Context, user string) (trio, error) {
		return dbos.RunAsStep(ctx, func(sctx context.Context) (trio, error) {
			var got trio
			var err error
			if got.A, err = s.Run(sctx.(dbos.Context), dbostool.Call{Principal: user, Args: toAna}); err != nil {
				return got, err
			}
			got.B, err = s.Run(sctx.(dbos.Context), dbostool.Call{Principal: user, Args: toAna})
			return got, err
		}, dbos.WithStepName("reminders"))
	}
	ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("reminders")) })
	h, err := dbos.RunWorkflow(ctx, wf, "tenant-42/user-7")
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.GetResult(dbos.WithHandleTimeout(bound))
	if errors.Is(err, dbostool.ErrInvalidCall) {
		return // refused: the workflow is told
	}
	if err != nil {
		t.Fatal(err)
	}
	if n := db.effects(t); got.A.Status == envelope.Success && got.B.Status == envelope.Success && n != 2 {
		t.Errorf("two reminders answered success (%s, replayed=%v; %s, replayed=%v) and made %d effect(s), want 2",
			got.A.RequestRef, got.A.Replayed, got.B.RequestRef, got.B.Replayed, n)
	}
}
