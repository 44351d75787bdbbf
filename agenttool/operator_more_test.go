package agenttool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// lostEmail leaves one send_email action unknown in store, for principal.
func lostEmail(t *testing.T, tool *agenttool.Tool, principal string) envelope.Envelope {
	t.Helper()
	env := tool.Invoke(agenttool.WithScope(context.Background(), principal, "conversation-1"), emailToAna)
	mustStatus(t, env, envelope.UnknownOutcome)
	return env
}

// An operator limited to one tool lists, shows and settles only its
// records; a record of another tool is not found.
func TestOperatorForTool(t *testing.T) {
	store := openBolt(t, t.TempDir()+"/keys.db")
	lost := func(n int) (bool, error) { return true, errLostReply }
	email := newEmailTool(t, &mailServer{script: lost}, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
	other, err := agenttool.New("send_sms", "Send an SMS.", (&mailServer{script: lost}).send,
		agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Retry: fastRetry, ClockSkew: -1})
	if err != nil {
		t.Fatal(err)
	}
	e := lostEmail(t, email, "tenant-1")
	s := other.Invoke(scoped(), emailToAna)
	mustStatus(t, s, envelope.UnknownOutcome)

	op, err := agenttool.NewOperator(store, email, other)
	if err != nil {
		t.Fatal(err)
	}
	sms := op.ForTool("send_sms")
	recs, err := sms.Unknown(context.Background(), "", 10)
	if err != nil || len(recs) != 1 || recs[0].Key != s.RequestRef {
		t.Fatalf("ForTool(send_sms).Unknown: %v, %v; want only %s", recs, err, s.RequestRef)
	}
	if _, err := sms.Show(context.Background(), e.RequestRef); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("ForTool(send_sms).Show of an email: %v, want ErrNotFound", err)
	}
	if err := sms.ResolveApplied(context.Background(), e.RequestRef, e.Attempts, nil, "maria", "seen"); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("ForTool(send_sms) settled an email: %v", err)
	}
	if err := sms.ResolveNotApplied(context.Background(), s.RequestRef, s.Attempts, "maria", "bounced"); err != nil {
		t.Fatal(err)
	}
}

// An operator compensates an unknown action: the tool's Compensate runs
// once, and the action is a definite failure (compensated) from then on;
// a failed compensation leaves it unknown and says why.
func TestOperatorCompensates(t *testing.T) {
	store := openBolt(t, t.TempDir()+"/keys.db")
	var undone []string
	fail := false
	m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce,
		Compensate: func(ctx context.Context, info agenttool.CallInfo) error {
			if fail {
				return errors.New("the recall API is down")
			}
			undone = append(undone, info.RequestRef)
			return nil
		}})
	op, _ := agenttool.NewOperator(store, tool)

	first := lostEmail(t, tool, "tenant-1")
	fail = true
	err := op.Compensate(context.Background(), first.RequestRef, first.Attempts, "maria", "customer asked to cancel")
	if err == nil || len(undone) != 0 {
		t.Fatalf("a failed compensation: %v, undone %v", err, undone)
	}
	rec, _ := op.Show(context.Background(), first.RequestRef)
	if rec.State != agenttool.Unknown || rec.Resolution == nil || rec.Resolution.Verdict != "compensation failed" {
		t.Errorf("after a failed compensation: %v, %+v", rec.State, rec.Resolution)
	}

	fail = false
	if err := op.Compensate(context.Background(), first.RequestRef, first.Attempts, "maria", "customer asked to cancel"); err != nil {
		t.Fatal(err)
	}
	if len(undone) != 1 || undone[0] != first.RequestRef {
		t.Errorf("compensated %v", undone)
	}
	again := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-1", "conversation-1"), emailToAna)
	if again.Status != envelope.DefiniteFailure || again.Error.Code != envelope.CodeCompensated || m.count() != 1 {
		t.Errorf("a call after compensation: %s; %d emails", again, m.count())
	}
	if err := op.Compensate(context.Background(), first.RequestRef, first.Attempts, "maria", "twice"); !errors.Is(err, agenttool.ErrNotUnknown) || len(undone) != 1 {
		t.Errorf("compensating a settled action: %v, undone %v", err, undone)
	}

	otherStore := openBolt(t, t.TempDir()+"/other.db")
	plain := newEmailTool(t, m, agenttool.Options{Store: otherStore, Class: agenttool.AtMostOnce})
	op2, _ := agenttool.NewOperator(otherStore, plain)
	lost := lostEmail(t, plain, "tenant-1")
	if err := op2.Compensate(context.Background(), lost.RequestRef, lost.Attempts, "maria", "undo"); !errors.Is(err, agenttool.ErrInvalidRequest) {
		t.Errorf("compensating with a tool without Compensate: %v, want ErrInvalidRequest", err)
	}
	if rec, _ := op2.Show(context.Background(), lost.RequestRef); rec.State != agenttool.Unknown {
		t.Errorf("the refused compensation left the record %v", rec.State)
	}
}

// A standalone operator program, which has no tools, lists and shows every
// record but settles only with ForAnyTool; the settlement is what the tool
// then replays.
func TestOperatorForAnyTool(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply
			}
			return true, nil
		}}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
		lost := lostEmail(t, tool, "tenant-1")

		bare, err := agenttool.NewOperator(store)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := bare.Unknown(context.Background(), "", 10)
		if err != nil || len(recs) != 1 {
			t.Fatalf("a toolless operator lists %v, %v", recs, err)
		}
		if err := bare.ResolveNotApplied(context.Background(), lost.RequestRef, lost.Attempts, "maria", "bounced"); !errors.Is(err, agenttool.ErrInvalidRequest) {
			t.Errorf("a toolless operator settled a record: %v", err)
		}
		// The stand-in knows no AttemptTimeout: attempt 1 may still land
		// for ClockSkew (1s) after it ended.
		err = bare.ForAnyTool(0).ResolveNotApplied(context.Background(), lost.RequestRef, lost.Attempts, "maria", "bounced")
		if !errors.Is(err, agenttool.ErrInFlight) {
			t.Errorf("a toolless operator's finding right after the attempt: %v; want ErrInFlight", err)
		}
		for deadline := time.Now().Add(3 * time.Second); errors.Is(err, agenttool.ErrInFlight) && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			err = bare.ForAnyTool(0).ResolveNotApplied(context.Background(), lost.RequestRef, lost.Attempts, "maria", "bounced")
		}
		if err != nil {
			t.Fatal(err)
		}
		env := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-1", "conversation-1"), emailToAna)
		mustStatus(t, env, envelope.Success)
		if m.count() != 2 {
			t.Errorf("%d emails; want the lost one and the one retry the operator allowed", m.count())
		}
	})
}

// Stats counts records by tool and state, for one principal or all.
func TestOperatorStats(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Fence: agenttool.FenceOff})
		lostEmail(t, tool, "tenant-1")
		lostEmail(t, tool, "tenant-2")
		op, _ := agenttool.NewOperator(store, tool)
		all, err := op.Stats(context.Background())
		want := []storekit.Count{{Tool: "send_email", State: agenttool.Unknown, Records: 2}}
		if err != nil || !slices.Equal(all, want) {
			t.Errorf("Stats: %+v, %v; want %+v", all, err, want)
		}
		one, err := op.ForPrincipal("tenant-2").Stats(context.Background())
		want[0].Records = 1
		if err != nil || !slices.Equal(one, want) {
			t.Errorf("ForPrincipal.Stats: %+v, %v; want %+v", one, err, want)
		}
		none, err := op.ForTool("send_sms").Stats(context.Background())
		if err != nil || len(none) != 0 {
			t.Errorf("ForTool(send_sms).Stats: %+v, %v; want nothing", none, err)
		}
	})
}

// Outcome decodes what a record holds: the unknown_outcome a person reads
// to see what went wrong and what the destination last answered.
func TestOperatorOutcome(t *testing.T) {
	store := openBolt(t, t.TempDir()+"/keys.db")
	m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Codec: newSealCodec(t)})
	lost := lostEmail(t, tool, "tenant-1")
	op, _ := agenttool.NewOperator(store, tool)
	rec, err := op.Show(context.Background(), lost.RequestRef)
	if err != nil {
		t.Fatal(err)
	}
	env, err := op.Outcome(rec)
	if err != nil || env.Status != envelope.UnknownOutcome || env.Error == nil || env.Error.Message != lost.Error.Message {
		t.Errorf("Outcome: %s, %v; want the envelope the call returned (%s)", env, err, lost)
	}
	if _, err := agenttool.NewOperator(store); err != nil {
		t.Fatal(err)
	}
	bare, _ := agenttool.NewOperator(store)
	if _, err := bare.Outcome(rec); !errors.Is(err, agenttool.ErrCorrupt) {
		t.Errorf("an operator without the tool's codec read the sealed outcome: %v", err)
	}
}

// A sweep reports its progress after each batch.
func TestSweepProgress(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
			Reconciler: fixed(reconcile.StillPending()), Fence: agenttool.FenceOff})
		for i := range 5 {
			mustStatus(t, tool.Invoke(agenttool.WithScope(context.Background(), "tenant-1", fmt.Sprint("c", i)), emailToAna), envelope.UnknownOutcome)
		}
		op, _ := agenttool.NewOperator(store, tool)
		var seen []agenttool.SweepReport
		rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{Concurrency: 2, Batch: 2,
			Progress: func(r agenttool.SweepReport) { seen = append(seen, r) }})
		if err != nil || rep.Checked != 5 {
			t.Fatalf("sweep: %+v, %v", rep, err)
		}
		if len(seen) < 2 {
			t.Errorf("%d progress reports for 5 records in batches of 2", len(seen))
		}
		for i := 1; i < len(seen); i++ {
			if seen[i].Checked < seen[i-1].Checked {
				t.Errorf("progress went back: %+v after %+v", seen[i], seen[i-1])
			}
		}
	})
}
