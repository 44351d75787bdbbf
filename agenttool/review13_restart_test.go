package agenttool_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

type mailTruth struct {
	m       *mailServer
	pending *atomic.Bool
}

func (r mailTruth) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	if r.pending != nil && r.pending.Load() {
		return reconcile.StillPending()
	}
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if slices.Contains(r.m.effects, req.Ref) {
		return reconcile.AppliedWith([]byte(`{"message_id":"<` + req.Ref + `@mail.test>"}`))
	}
	return reconcile.NotAppliedFenced()
}

// The process dies while a reworded call (B) sends in place of the
// unknown email (A1), which it holds "in-place-of:B": the store on disk
// (boltstore) is what a restart finds. B's email was delivered. After the
// restart, the leases lapse; the identical resend of A1, the reworded
// call again, and the operator's listing must all tell the truth, and the
// resend must not send.
func TestReview13_RestartWhileHeldInPlace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.db")
	store := openBolt(t, path)
	g := newGatedMail(2)
	var pending atomic.Bool
	pending.Store(true)
	tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: mailTruth{g.mailServer, &pending},
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, Lease: time.Second, AttemptTimeout: 100 * time.Millisecond, ClockSkew: -1})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	pending.Store(false)
	go tool.Invoke(scoped(), review11Reworded)
	<-g.started
	// The disk as the crash leaves it.
	time.Sleep(50 * time.Millisecond)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(dir, "crashed.db")
	if err := os.WriteFile(crashed, b, 0o600); err != nil {
		t.Fatal(err)
	}
	close(g.gate) // B's email goes out; its process is gone

	store2 := openBolt(t, crashed)
	tool2 := newEmailTool(t, g.mailServer, agenttool.Options{Store: store2, Class: agenttool.Reconcilable, Reconciler: mailTruth{g.mailServer, nil},
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, Lease: time.Second, AttemptTimeout: 100 * time.Millisecond, ClockSkew: -1,
		WaitTimeout: 50 * time.Millisecond})
	early := tool2.Invoke(scoped(), lunch)
	t.Logf("resend right after the restart: %s", early)
	if early.Status == envelope.Success {
		t.Errorf("resend right after the restart ran: %s", early)
	}
	op, err := agenttool.NewOperator(store2, tool2)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	recs, err := op.Unknown(context.Background(), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		t.Logf("operator lists %s %v attempts=%d owner=%q", r.Key, r.State, r.Attempts, r.Owner)
	}
	resend := tool2.Invoke(scoped(), lunch)
	again := tool2.Invoke(scoped(), review11Reworded)
	t.Logf("resend after the leases lapsed: %s", resend)
	t.Logf("reworded again:                 %s", again)
	time.Sleep(100 * time.Millisecond)
	if n := g.count(); n != 1 {
		t.Errorf("emails to Ana: %d (%v); want 1", n, g.effects)
	}
	if resend.Status == envelope.Success && !resend.Replayed {
		t.Errorf("resend ran: %s", resend)
	}
}
