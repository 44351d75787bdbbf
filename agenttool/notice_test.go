package agenttool_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// noticeSetup leaves an unknown send_email in conversation-9 of user-7,
// then has the fence find it applied for a reworded resend.
func noticeSetup(t *testing.T, opts agenttool.Options) (*agenttool.Tool, *mailServer, *clock, envelope.Envelope) {
	t.Helper()
	var lost sync.Once
	m := &mailServer{script: func(int) (bool, error) {
		var err error
		lost.Do(func() { err = errLostReply })
		return true, err
	}}
	check := &answers{answer: reconcile.StillPending()}
	clk := &clock{now: time.Now()}
	opts.Store, opts.Class, opts.Reconciler, opts.Now = memstore.New(), agenttool.Reconcilable, check, clk.Now
	tool := newEmailTool(t, m, opts)
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	check.set(reconcile.AppliedWith([]byte(`{"message_id":"<first@mail.test>"}`)))
	told := tool.Invoke(scoped(), lunchReworded)
	if told.Status != envelope.DefiniteFailure || told.Error.Code != envelope.CodeEarlierApplied {
		t.Fatalf("the reworded resend: %s; want earlier_action_applied", told)
	}
	return tool, m, clk, first
}

func otherSession() context.Context {
	return agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10")
}

// The notice covers the fence's scope: the session by default, the
// principal with FencePrincipal; never another principal.
func TestNoticeHoldCoversTheFencesScope(t *testing.T) {
	bob := `{"to":"bob@example.com","subject":"Lunch","body":"Join us?"}`
	t.Run("session", func(t *testing.T) {
		tool, m, _, first := noticeSetup(t, agenttool.Options{})
		// The same turn's identical repeat of the refused call, and a call to
		// someone else: both were made before the model read the answer.
		for _, in := range []string{lunchReworded, bob} {
			env := tool.Invoke(scoped(), in)
			if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeEarlierApplied ||
				env.Earlier.RequestRef != first.RequestRef || string(env.Earlier.Result) != `{"message_id":"<first@mail.test>"}` {
				t.Errorf("%s in the same conversation: %s; want earlier_action_applied for %s", in, env, first.RequestRef)
			}
		}
		mustStatus(t, tool.Invoke(otherSession(), bob), envelope.Success)
		if n := m.count(); n != 2 {
			t.Errorf("%d emails, want the first and the other conversation's", n)
		}
	})
	t.Run("principal", func(t *testing.T) {
		tool, m, _, _ := noticeSetup(t, agenttool.Options{Fence: agenttool.FencePrincipal})
		if env := tool.Invoke(otherSession(), bob); env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied {
			t.Errorf("another conversation of the principal: %s; want earlier_action_applied", env)
		}
		other := agenttool.WithScope(context.Background(), "tenant-42/user-8", "conversation-9")
		mustStatus(t, tool.Invoke(other, bob), envelope.Success)
		if n := m.count(); n != 2 {
			t.Errorf("%d emails, want the first and the other principal's", n)
		}
	})
}

// The hold ends NoticeHold after the fence's answer; a negative NoticeHold
// gives the answer once.
func TestNoticeHoldEnds(t *testing.T) {
	tool, m, clk, _ := noticeSetup(t, agenttool.Options{NoticeHold: time.Minute})
	clk.Advance(59 * time.Second)
	if env := tool.Invoke(scoped(), lunchReworded); env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied {
		t.Errorf("within NoticeHold: %s; want earlier_action_applied", env)
	}
	clk.Advance(time.Second)
	mustStatus(t, tool.Invoke(scoped(), lunchReworded), envelope.Success)
	if n := m.count(); n != 2 {
		t.Errorf("%d emails, want 2", n)
	}

	tool, m, _, _ = noticeSetup(t, agenttool.Options{NoticeHold: -1})
	mustStatus(t, tool.Invoke(scoped(), lunchReworded), envelope.Success)
	if n := m.count(); n != 2 {
		t.Errorf("with NoticeHold -1: %d emails, want 2", n)
	}
}

// A keyed action left unknown and then completed by its own resend (the
// destination replays it) holds the scope's other new writes as the fence
// would: the model may have reworded it in the same turn.
func TestNoticeAfterAKeyedResendCompletesTheAction(t *testing.T) {
	lose := true
	m := &mailServer{dedupe: true, script: func(int) (bool, error) {
		if lose {
			return true, errLostReply
		}
		return true, nil
	}}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	lose = false
	mustStatus(t, tool.Invoke(scoped(), lunch), envelope.Success)
	reworded := tool.Invoke(scoped(), lunchReworded)
	if reworded.Error == nil || reworded.Error.Code != envelope.CodeEarlierApplied || reworded.Earlier.RequestRef != first.RequestRef {
		t.Errorf("a reworded call right after the resend: %s; want earlier_action_applied for %s", reworded, first.RequestRef)
	}
	if n := m.count(); n != 1 {
		t.Errorf("%d emails, want 1", n)
	}
}

// An operator's check that finds the action applied holds the scope's
// other new writes too.
func TestNoticeAfterAnOperatorFindsTheActionApplied(t *testing.T) {
	var lost sync.Once
	m := &mailServer{script: func(int) (bool, error) {
		var err error
		lost.Do(func() { err = errLostReply })
		return true, err
	}}
	check := &answers{answer: reconcile.StillPending()}
	store := memstore.New()
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	check.set(reconcile.AppliedWith([]byte(`{"message_id":"<first@mail.test>"}`)))
	if v, err := op.Reconcile(context.Background(), first.RequestRef, "maria"); err != nil || v != reconcile.Applied {
		t.Fatalf("operator's check: %v, %v", v, err)
	}
	reworded := tool.Invoke(scoped(), lunchReworded)
	if reworded.Error == nil || reworded.Error.Code != envelope.CodeEarlierApplied {
		t.Errorf("a reworded call right after the operator's check: %s; want earlier_action_applied", reworded)
	}
	if n := m.count(); n != 1 {
		t.Errorf("%d emails, want 1", n)
	}
}

// A reworded call that the fence let go on because the earlier action was
// found not applied holds the earlier action's own resend for NoticeHold,
// saying what was done instead; after the hold the resend may run (the
// earlier action stays approved for one more attempt).
func TestNoticeAfterACallReplacesAnActionFoundNotApplied(t *testing.T) {
	m := &mailServer{script: func(n int) (bool, error) {
		if n == 1 {
			return false, errLostReply // never delivered; the reply is lost
		}
		return true, nil
	}}
	check := &answers{answer: reconcile.StillPending()}
	clk := &clock{now: time.Now()}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: check, Now: clk.Now,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	check.set(reconcile.NotAppliedFenced())
	reworded := tool.Invoke(scoped(), lunchReworded)
	mustStatus(t, reworded, envelope.Success)
	resend := tool.Invoke(scoped(), lunch)
	if resend.Status != envelope.DefiniteFailure || resend.Error.Code != envelope.CodeEarlierApplied ||
		resend.Earlier.RequestRef != reworded.RequestRef || !strings.Contains(resend.Note, "was just done") {
		t.Errorf("the earlier action's resend right after: %s; want earlier_action_applied naming %s", resend, reworded.RequestRef)
	}
	if n := m.count(); n != 1 {
		t.Fatalf("%d emails, want 1", n)
	}
	clk.Advance(11 * time.Second)
	mustStatus(t, tool.Invoke(scoped(), lunch), envelope.Success)
	if n := m.count(); n != 2 {
		t.Errorf("%d emails after the hold, want 2 (the user asked again)", n)
	}
}
