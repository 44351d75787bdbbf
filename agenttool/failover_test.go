package agenttool_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// wentBack is a store that went back in time at since, as a database
// does when a standby that had not received the primary's last writes is
// promoted: for an Unkeyed claim it finds no record of, it decides as
// storekit.DecideLost does (a record pending under a holder that died at
// since), by putting that record in place, unknown, before the claim.
// pgstore's failover tests play the same with real servers.
type wentBack struct {
	*memstore.Store
	since time.Time
	mu    sync.Mutex
}

func (w *wentBack) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !req.Unkeyed {
		return w.Store.Claim(ctx, req)
	}
	if _, err := w.Get(ctx, req.Key); !errors.Is(err, storekit.ErrNotFound) {
		return w.Store.Claim(ctx, req)
	}
	presumed := storekit.Record{Key: req.Key, Tool: req.Tool, State: storekit.Unknown, Principal: req.Principal, Session: req.Session,
		Fingerprint: req.Fingerprint, LeaseExpiry: w.since, Created: w.since, Updated: w.since, FenceScope: req.FenceScope, Token: 1}
	if err := w.Import(ctx, []storekit.Record{presumed}); err != nil {
		return storekit.ClaimResult{}, err
	}
	res, err := w.Store.Claim(ctx, req)
	res.Lost = err == nil && res.Blocked == nil
	return res, err
}

// After a failover that may have lost an action's record, a missing record
// is not taken for a new action: an at-most-once tool does not run and
// says why, a reconcilable one asks its destination first, and a keyed one
// goes on under the same key, which its destination dedupes.
func TestLostRecordsAfterAFailoverAreNotNewActions(t *testing.T) {
	since := time.Now().Add(-time.Minute)
	open := func() *wentBack { return &wentBack{Store: memstore.New(), since: since} }

	t.Run("at-most-once: unknown_outcome, the tool does not run", func(t *testing.T) {
		m := &mailServer{}
		tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.AtMostOnce})
		env := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, env, envelope.UnknownOutcome)
		if m.runs.Load() != 0 {
			t.Fatalf("the tool ran %d times after the store went back; want 0", m.runs.Load())
		}
		if env.Next != envelope.AskHuman || env.Error == nil || env.Error.Code != envelope.CodeOutcomeUnknown || !strings.Contains(env.Note, "failed over") {
			t.Errorf("envelope %s: want outcome_unknown, ask_human, and a note that says the store failed over", env)
		}
		// The same action asked again: still unknown, until a person settles it.
		again := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, again, envelope.UnknownOutcome)
		if m.runs.Load() != 0 {
			t.Fatalf("the tool ran on the second call")
		}
	})

	for _, tc := range []struct {
		name    string
		answer  reconcile.Answer
		runs    int
		status  envelope.Status
		recon   bool
		effects int
	}{
		{"reconcilable, found applied: success, reconciled, not run", reconcile.AppliedWith([]byte(`{"message_id":"<x>"}`)), 0, envelope.Success, true, 0},
		{"reconcilable, found not applied: run once", reconcile.NotAppliedYet(), 1, envelope.Success, false, 1},
		{"reconcilable, no answer: unknown, not run", reconcile.StillPending(), 0, envelope.UnknownOutcome, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &mailServer{}
			var asked []reconcile.Request
			check := reconcile.RequestFunc(func(ctx context.Context, req reconcile.Request) reconcile.Answer {
				asked = append(asked, req)
				return tc.answer
			})
			tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.Reconcilable, Reconciler: check})
			env := tool.Invoke(scoped(), emailToAna)
			mustStatus(t, env, tc.status)
			if len(asked) == 0 {
				t.Fatal("the destination was not asked before the tool ran")
			}
			if int(m.runs.Load()) != tc.runs || m.count() != tc.effects || env.Reconciled != tc.recon {
				t.Errorf("runs %d, effects %d, reconciled %v; want %d, %d, %v; envelope %s", m.runs.Load(), m.count(), env.Reconciled,
					tc.runs, tc.effects, tc.recon, env)
			}
		})
	}

	t.Run("keyed: goes on under the same key", func(t *testing.T) {
		m := &mailServer{dedupe: true}
		tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.Keyed})
		env := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, env, envelope.Success)
		if m.runs.Load() != 1 || m.count() != 1 {
			t.Errorf("runs %d, effects %d; want 1 and 1", m.runs.Load(), m.count())
		}
	})
}

// In pgstore's failover window a missing record proves nothing (the
// store may have lost it: storekit.DecideLost), so a copy held back there
// by an action found done is answered earlier_action_applied but not kept
// under its key — its key may have run before the failover, and a kept
// "not run" could lie. Asked for again word for word after the notice, it
// is taken over, and its own reference is asked about before it runs: it
// runs once (docs/stores.md, the failover window).
func TestFailover_ACopyHeldBackInTheWindowIsCheckedByItsOwnReferenceAndNotKept(t *testing.T) {
	store := pgtest.Open(t)
	m := &mailServer{script: lostFirstReply}
	check := &foundByRef{pending: true, applied: map[string]bool{}}
	clk := &clock{now: time.Now()}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check, Now: clk.Now})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)

	// The store fails over (a new timeline): the window of distrust opens.
	tl := pgx.Identifier{store.Schema(), "timeline"}.Sanitize()
	if _, err := store.Pool().Exec(context.Background(), `UPDATE `+tl+` SET timeline = -1`); err != nil {
		t.Fatal(err)
	}
	check.found(first.RequestRef)

	x := tool.Invoke(scoped(), lunchReworded)
	t.Logf("reworded copy in the window: %s", x)
	if x.Error == nil || x.Error.Code != envelope.CodeEarlierApplied {
		t.Fatalf("reworded copy: %s; want earlier_action_applied", x)
	}
	if strings.Contains(x.Note, "same input will not") {
		t.Errorf("the copy held back in the window says it is kept: %s", x.Note)
	}
	if _, err := store.Get(context.Background(), x.RequestRef); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("the copy held back in the window has a record (%v); want none", err)
	}
	clk.Advance(11 * time.Second)
	again := tool.Invoke(scoped(), lunchReworded)
	mustStatus(t, again, envelope.Success)
	check.mu.Lock()
	asked := slices.Contains(check.checks, x.RequestRef)
	check.mu.Unlock()
	if !asked || m.count() != 2 || m.sent(x.RequestRef) != 1 {
		t.Errorf("the copy asked for again: asked about its own reference %v, %d emails, %d of it; want asked, then sent once", asked, m.count(), m.sent(x.RequestRef))
	}
}

// slowWire is a destination whose first request is dropped (never
// delivered), whose second is accepted but lands only when the test says
// (land), and whose later ones are delivered at once. Every reply of the
// first two is lost. Its status search shows what has landed.
type slowWire struct {
	mu        sync.Mutex
	runs      int
	delivered map[string]int
	inFlight  []string
}

func (w *slowWire) send(ctx context.Context, in emailInput) (sent, error) {
	ref := agenttool.RequestRef(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.delivered == nil {
		w.delivered = map[string]int{}
	}
	w.runs++
	switch w.runs {
	case 1:
		return sent{}, errLostReply
	case 2:
		w.inFlight = append(w.inFlight, ref)
		return sent{}, errLostReply
	}
	w.delivered[ref]++
	return sent{MessageID: "<" + ref + ">"}, nil
}

func (w *slowWire) land() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ref := range w.inFlight {
		w.delivered[ref]++
	}
	w.inFlight = nil
}

func (w *slowWire) sent(ref string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.delivered[ref]
}

func (w *slowWire) check(_ context.Context, ref string) reconcile.Answer {
	if w.sent(ref) > 0 {
		return reconcile.AppliedWith([]byte(`{"message_id":"x"}`))
	}
	return reconcile.NotAppliedYet()
}

// failBack plays, on a pgstore, a failover to a standby that had received
// the record of ref as snapshot() found it and nothing after: the row is
// put back as it was, and the server's timeline changes (the window of
// distrust opens at the next claim).
type failBack struct {
	s   *pgstore.Store
	ref string
}

func (f failBack) snapshot(t *testing.T) {
	t.Helper()
	tbl := pgx.Identifier{f.s.Schema(), "records"}.Sanitize()
	snap := pgx.Identifier{f.s.Schema(), "standby_copy"}.Sanitize()
	if _, err := f.s.Pool().Exec(context.Background(), `CREATE TABLE `+snap+` AS SELECT * FROM `+tbl+` WHERE key = $1`, f.ref); err != nil {
		t.Fatal(err)
	}
}

func (f failBack) failOver(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	tbl := pgx.Identifier{f.s.Schema(), "records"}.Sanitize()
	snap := pgx.Identifier{f.s.Schema(), "standby_copy"}.Sanitize()
	tl := pgx.Identifier{f.s.Schema(), "timeline"}.Sanitize()
	for _, q := range []string{`DELETE FROM ` + tbl + ` WHERE key = $1`, `INSERT INTO ` + tbl + ` SELECT * FROM ` + snap + ` WHERE key = $1`} {
		if _, err := f.s.Pool().Exec(ctx, q, f.ref); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.s.Pool().Exec(ctx, `UPDATE `+tl+` SET timeline = -1`); err != nil {
		t.Fatal(err)
	}
}

// rolledBackScene: a reconcilable email tool on a pgstore with no
// standby in sight (its claims are made as on one server; the timeline
// check and the failover window still apply: docs/stores.md, High
// availability). Attempt 1 is dropped and its reply lost: unknown. What
// the standby receives stops there. Once attempt 1 can no longer land,
// the model resends: the call takes the action over, the destination
// rightly says not applied, attempt 2 goes out — and is still on its way
// when the primary dies and the standby, which knows only attempt 1, is
// promoted.
func rolledBackScene(t *testing.T) (*slowWire, *clock, *pgstore.Store, *agenttool.Tool, envelope.Envelope) {
	t.Helper()
	store := pgtest.Open(t)
	w := &slowWire{}
	clk := &clock{now: time.Now()}
	tool, err := agenttool.New("send_email", "Send an email.", w.send, agenttool.Options{
		Store: store, Class: agenttool.Reconcilable, Reconciler: reconcile.Func(w.check), Now: clk.Now,
		AttemptTimeout: 30 * time.Second, ClockSkew: time.Second, Retry: agenttool.RetryPolicy{MaxAttempts: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	fb := failBack{store, first.RequestRef}
	fb.snapshot(t) // what the standby has received

	clk.Advance(32 * time.Second) // attempt 1 can no longer land
	second := tool.Invoke(scoped(), lunch)
	mustStatus(t, second, envelope.UnknownOutcome) // attempt 2 sent, on its way
	if rec, err := store.Get(context.Background(), first.RequestRef); err != nil || rec.Attempts != 2 {
		t.Fatalf("after the resend: attempts %d, %v; want 2", rec.Attempts, err)
	}

	fb.failOver(t)
	clk.Advance(time.Second) // attempt 2 may still land for 30 s more
	return w, clk, store, tool, first
}

// Within the failover window, a record the failover rolled back (the
// standby has attempt 1; attempt 2 went out from the old primary) lets no
// not-applied answer through while the old primary's last attempt may
// still land: its last attempt counts as sent when the store noticed the
// new timeline, at the earliest — for a model's resend, the sweeper of
// another replica, and a person alike (storekit.DecideLost). (Found by a
// review: each trusted the standby's record, attempt 1 long over, and the
// email went twice, answered success.)
func TestFailover_ARecordTheFailoverRolledBackCountsItsLastAttemptAsSentAtTheNotice(t *testing.T) {
	for _, who := range []string{"a resend", "the sweeper", "a person"} {
		t.Run(who, func(t *testing.T) {
			w, clk, store, tool, first := rolledBackScene(t)
			op, err := agenttool.NewOperator(store, tool)
			if err != nil {
				t.Fatal(err)
			}
			switch who {
			case "a resend":
				env := tool.Invoke(scoped(), lunch)
				w.land() // attempt 2, sent by the old primary, lands
				mustBeTrue(t, "the resend in the window", env, w, store)
			case "the sweeper":
				if _, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{}); err != nil {
					t.Fatal(err)
				}
				w.land()
			case "a person":
				err := op.ResolveNotApplied(context.Background(), first.RequestRef, 1, "maria", "not in the mail log")
				if !errors.Is(err, agenttool.ErrInFlight) {
					t.Errorf("a person's not-applied in the window, at the standby's attempt: %v; want ErrInFlight", err)
				}
				w.land()
			}
			clk.Advance(11 * time.Minute) // past the window; the model resends
			again := tool.Invoke(scoped(), lunch)
			mustBeTrue(t, "the resend after the window", again, w, store)
			if n := w.sent(first.RequestRef); n != 1 {
				t.Errorf("sent %d times; want 1 (attempt 2 of the old primary): %s", n, again)
			}
		})
	}
}
