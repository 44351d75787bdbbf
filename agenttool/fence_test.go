package agenttool_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// answers is a reconciler whose answer the test sets, counting checks.
type answers struct {
	mu     sync.Mutex
	answer reconcile.Answer
	checks []string
}

func (a *answers) set(ans reconcile.Answer) { a.mu.Lock(); a.answer = ans; a.mu.Unlock() }

func (a *answers) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	ref := req.Ref
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checks = append(a.checks, ref)
	return a.answer
}

const (
	lunch         = `{"to":"ana@example.com","subject":"Lunch","body":"See you at noon."}`
	lunchReworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Shall we meet at noon?"}`
)

// I9: after unknown_outcome, a reworded resend is a new key, and must not
// run while the first action is unknown. The fence asks the destination
// about the first action, and settles it by the answer.
func TestI9_RewordedResendWaitsForTheUnknownAction(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		var lost sync.Once
		m := &mailServer{script: func(int) (bool, error) {
			var err error
			lost.Do(func() { err = errLostReply }) // the first reply is lost
			return true, err
		}}
		check := &answers{answer: reconcile.StillPending()}
		clk := &clock{now: time.Now()}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check, Now: clk.Now})
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)

		// Still pending: the reworded resend does not run.
		held := tool.Invoke(scoped(), lunchReworded)
		mustStatus(t, held, envelope.UnknownOutcome)
		if held.Error.Code != envelope.CodeEarlierUnknown || held.Earlier == nil || held.Earlier.RequestRef != first.RequestRef ||
			held.Earlier.State != envelope.ActionUnknown || held.Next != envelope.DoNotRetry || !strings.Contains(held.Note, "nothing new was done") {
			t.Errorf("reworded resend while the first is pending: %s", held)
		}
		if m.count() != 1 {
			t.Fatalf("a second email went out while the first was unknown: %d", m.count())
		}

		// Applied: the resend still does not run, and says the first happened.
		check.set(reconcile.AppliedWith([]byte(`{"message_id":"<first@mail.test>"}`)))
		told := tool.Invoke(scoped(), lunchReworded)
		mustStatus(t, told, envelope.DefiniteFailure)
		if told.Error.Code != envelope.CodeEarlierApplied || told.Earlier == nil || told.Earlier.State != envelope.ActionSucceeded ||
			string(told.Earlier.Result) != `{"message_id":"<first@mail.test>"}` || told.Next != envelope.AskHuman {
			t.Errorf("reworded resend after the first was found applied: %s", told)
		}
		if m.count() != 1 {
			t.Fatalf("a second email went out: %d", m.count())
		}
		replay := tool.Invoke(scoped(), lunch)
		if replay.Status != envelope.Success || !replay.Reconciled {
			t.Errorf("the first action after the fence settled it: %s", replay)
		}

		// Another call the model made before it read that answer (a second
		// tool call of the same turn, another wording) gets the same answer.
		again := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch?","body":"Noon on Friday?"}`)
		if again.Status != envelope.DefiniteFailure || again.Error.Code != envelope.CodeEarlierApplied || again.Earlier.RequestRef != first.RequestRef {
			t.Errorf("another wording right after the answer: %s", again)
		}
		if m.count() != 1 {
			t.Fatalf("a second email went out: %d", m.count())
		}

		// Once NoticeHold has passed since that answer, the fence has lifted:
		// a new action (the user asked for it) runs.
		clk.Advance(11 * time.Second)
		mustStatus(t, tool.Invoke(scoped(), lunchReworded), envelope.Success)
		if m.count() != 2 {
			t.Errorf("the second action, asked for after the first was settled, ran %d times", m.count()-1)
		}
	})
}

// When the destination says the earlier action was not applied, it is
// settled so, and the new call proceeds.
func TestI9_NotAppliedLiftsTheFence(t *testing.T) {
	store := memstore.New()
	runs := 0
	m := &mailServer{script: func(n int) (bool, error) {
		runs = n
		if n == 1 {
			return false, errLostReply // never delivered, but the caller cannot know
		}
		return true, nil
	}}
	check := &answers{answer: reconcile.StillPending()}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check, ClockSkew: -1,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	check.set(reconcile.NotAppliedYet())
	second := tool.Invoke(scoped(), lunchReworded)
	mustStatus(t, second, envelope.Success)
	rec, err := store.Get(context.Background(), first.RequestRef)
	if err != nil || !rec.RetryApproved || rec.Resolution == nil || rec.Resolution.By != "fence" {
		t.Errorf("the earlier record after a not-applied verdict: %+v, %v", rec, err)
	}
	if runs != 2 || m.count() != 1 {
		t.Errorf("runs %d, effects %d; want the new action run once", runs, m.count())
	}
}

// The fence's scope: the session by default, the principal, or off.
func TestI9_FenceScopes(t *testing.T) {
	for _, tt := range []struct {
		fence                     agenttool.FenceScope
		sameSession, otherSession bool // held back?
	}{
		{agenttool.FenceSession, true, false},
		{agenttool.FencePrincipal, true, true},
		{agenttool.FenceOff, false, false},
	} {
		t.Run(tt.fence.String(), func(t *testing.T) {
			m := &mailServer{script: func(n int) (bool, error) {
				if n == 1 {
					return true, errLostReply
				}
				return true, nil
			}}
			// At-most-once: nothing can ask the destination, so an unknown
			// action holds the fence until a person settles it.
			tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce, Fence: tt.fence})
			first := tool.Invoke(scoped(), lunch)
			mustStatus(t, first, envelope.UnknownOutcome)
			same := tool.Invoke(scoped(), lunchReworded)
			other := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10"), lunchReworded)
			otherPrincipal := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-42/user-8", "conversation-9"), lunchReworded)
			for _, c := range []struct {
				name string
				env  envelope.Envelope
				held bool
			}{{"same session", same, tt.sameSession}, {"other session", other, tt.otherSession}, {"other principal", otherPrincipal, false}} {
				isHeld := c.env.Error != nil && c.env.Error.Code == envelope.CodeEarlierUnknown
				if isHeld != c.held {
					t.Errorf("%s: %s; held back = %v, want %v", c.name, c.env, isHeld, c.held)
				}
				if isHeld && (c.env.Status != envelope.UnknownOutcome || c.env.Next != envelope.AskHuman) {
					t.Errorf("%s: %s; want unknown_outcome, ask_human", c.name, c.env)
				}
			}
		})
	}
}

// The fence holds across a restart: the unknown record is in the file, and
// a new process finds it by its scope.
func TestI9_FenceSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	store := openBolt(t, path)
	m := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
	first := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce}).Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	store.Close()

	store = openBolt(t, path)
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
	env := tool.Invoke(scoped(), lunchReworded)
	if env.Error == nil || env.Error.Code != envelope.CodeEarlierUnknown || env.Earlier.RequestRef != first.RequestRef {
		t.Errorf("after a restart: %s", env)
	}
	if m.runs.Load() != 1 {
		t.Fatalf("the tool ran %d times", m.runs.Load())
	}
}

// A dead holder's action (its lease lapsed) is unknown too: the fence asks
// about it before a new write.
func TestI9_DeadHolderFencesTheScope(t *testing.T) {
	store := memstore.New()
	c := newClock()
	m := &mailServer{}
	check := &answers{answer: reconcile.StillPending()}
	opts := agenttool.Options{Store: store, Class: agenttool.Keyed, Reconciler: check, Now: c.Now}
	tool := newEmailTool(t, m, opts)
	// A process claims the key and dies before recording anything.
	ref := recordOfRef(t, lunch)
	holderOf(t, store, ref, c.Now(), lunch)
	c.Advance(2 * time.Minute)
	env := tool.Invoke(scoped(), lunchReworded)
	if env.Error == nil || env.Error.Code != envelope.CodeEarlierUnknown || env.Earlier.RequestRef != ref {
		t.Errorf("a new action while a dead holder's is unknown: %s", env)
	}
	if m.runs.Load() != 0 || len(check.checks) != 1 || check.checks[0] != ref {
		t.Errorf("runs %d, checks %v; want the dead holder's action checked and nothing run", m.runs.Load(), check.checks)
	}
}

// If the fence cannot read the store, nothing runs (I4): the claim says an
// earlier action awaits reconciliation, and listing it fails.
func TestI9_FenceFailsClosed(t *testing.T) {
	store := &failingList{Store: memstore.New()}
	m := &mailServer{}
	env := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable}).Invoke(scoped(), lunch)
	mustStatus(t, env, envelope.DefiniteFailure)
	if env.Error.Code != envelope.CodeStoreUnavailable || m.runs.Load() != 0 {
		t.Errorf("listing failed: %s, runs %d", env, m.runs.Load())
	}
	if store.Len() != 0 {
		t.Errorf("the refused call left %d records", store.Len())
	}
}

type failingList struct{ *memstore.Store }

func (f *failingList) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	res, err := f.Store.Claim(ctx, req)
	res.Fenced = res.Claimed
	return res, err
}

func (f *failingList) ListUnknown(context.Context, storekit.ListRequest) ([]agenttool.Record, error) {
	return nil, errors.New("index unreadable")
}
