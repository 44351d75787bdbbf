package agenttool_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// importExpired fills store with n succeeded records of tool that expired
// an hour ago.
func importExpired(t *testing.T, store agenttool.Store, tool string, n int) {
	t.Helper()
	now := time.Now()
	var recs []agenttool.Record
	for i := range n {
		recs = append(recs, agenttool.Record{
			Key: fmt.Sprintf("%s/expired-%d", tool, i), Tool: tool, State: agenttool.Succeeded, Token: uint64(i + 1), Attempts: 1,
			Outcome: []byte(`{}`), Created: now.Add(-2 * time.Hour), Updated: now.Add(-2 * time.Hour), Expires: now.Add(-time.Hour),
		})
	}
	if err := store.(storekit.Importer).Import(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
}

// A pass keeps to its budgets: with no time to spare it still checks one
// record and makes one deletion step, says it is behind, and the next
// passes go on where it stopped; with time, a pass checks and deletes
// everything.
func TestSweepPassesKeepToTheirBudgets(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		const backlog, unknown = 1500, 3
		importExpired(t, store, "send_email", backlog)
		lost := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
		refs := unknownRecords(t, newEmailTool(t, lost, agenttool.Options{Store: store, Class: agenttool.Reconcilable}), unknown)
		applied := reconcile.Func(func(context.Context, string) reconcile.Answer { return reconcile.AppliedWith([]byte(`{}`)) })
		tool := newEmailTool(t, lost, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: applied, ClockSkew: -1})
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tight := agenttool.SweeperOptions{Concurrency: 1, CheckBudget: time.Nanosecond, ExpireBudget: time.Nanosecond}
		rep, err := op.SweepOnce(ctx, tight)
		if err != nil {
			t.Fatal(err)
		}
		// One deletion step: part of the backlog — or all of it on
		// boltstore, whose step drops the generations of expired records
		// whole, at a cost that does not grow with them.
		_, whole := store.(*boltstore.Store)
		if rep.Checked != 1 || rep.Expired == 0 || (rep.Expired >= backlog && !whole) || !rep.Behind {
			t.Errorf("a pass with no time to spare: %+v; want one record checked and one deletion step, not all %d, and to be told it is behind", rep, backlog)
		}
		deleted, checked := rep.Expired, rep.Checked
		tight.Behind = true // as RunSweeper passes it on
		if rep, err = op.SweepOnce(ctx, tight); err != nil || rep.Checked != 1 {
			t.Errorf("the next such pass: %+v, %v; want the next record checked", rep, err)
		}
		deleted, checked = deleted+rep.Expired, checked+rep.Checked
		rep, err = op.SweepOnce(ctx, agenttool.SweeperOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if deleted+rep.Expired != backlog || checked+rep.Checked != unknown || rep.Behind {
			t.Errorf("then a pass with time: %+v; in all %d of %d deleted, %d of %d checked", rep, deleted+rep.Expired, backlog, checked+rep.Checked, unknown)
		}
		if left, _ := op.Unknown(ctx, "", 0); len(left) != 0 {
			t.Errorf("%d of %v still unknown", len(left), refs)
		}
	})
}

// An operator's clock is its first tool's, whatever the others' are: a
// record that expired by one tool's clock and not by the first's is not
// swept, on every pass.
func TestAnOperatorsClockIsItsFirstTools(t *testing.T) {
	store := memstore.New()
	at := func(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }
	text := func(now func() time.Time) *agenttool.Tool {
		tool, err := agenttool.New("send_text", "Send a text.", func(ctx context.Context, in noteIn) (string, error) { return "sent", nil },
			agenttool.Options{Store: store, Class: agenttool.AtMostOnce, KeyTTL: time.Hour, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return tool
	}
	// Settled an hour and a half ago: expired half an hour ago by the
	// machine's clock, not by a clock two hours behind it.
	mustStatus(t, text(at(-90*time.Minute)).Invoke(scoped(), `{"text":"hello"}`), envelope.Success)
	first := newEmailTool(t, &mailServer{}, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Now: at(-2 * time.Hour)})
	for range 20 {
		op, err := agenttool.NewOperator(store, first, text(nil))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
		if err != nil || rep.Expired != 0 {
			t.Fatalf("a pass deleted %d records (%v); want none, by the first tool's clock", rep.Expired, err)
		}
	}
}
