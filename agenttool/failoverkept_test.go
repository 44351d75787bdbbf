package agenttool_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// foundWire drops its first request (never delivered, reply lost)
// and delivers every later one.
type foundWire struct {
	mu        sync.Mutex
	runs      int
	delivered map[string][]string
}

func (w *foundWire) send(ctx context.Context, in emailInput) (sent, error) {
	ref := agenttool.RequestRef(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.runs++
	if w.runs == 1 {
		return sent{}, errLostReply
	}
	if w.delivered == nil {
		w.delivered = map[string][]string{}
	}
	w.delivered[ref] = append(w.delivered[ref], in.Body)
	return sent{MessageID: "<" + ref + ">"}, nil
}

func (w *foundWire) sent(ref string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.delivered[ref])
}

func (w *foundWire) check(_ context.Context, ref string) reconcile.Answer {
	if w.sent(ref) > 0 {
		return reconcile.AppliedWith([]byte(`{"message_id":"x"}`))
	}
	return reconcile.NotAppliedYet()
}

// I5 in the failover window: an action unknown, found not applied by a
// person (approved for one more attempt), is asked for with other details
// (the same key: to and subject identify it; another body) after the
// store noticed a new timeline. Outside the window that is
// key_reused_with_different_input and the approved record is untouched;
// in the window it must be too — no claim of that key with another input
// can have been lost while its record lived.
func TestFailover_AnotherInputDoesNotSpendTheApproval(t *testing.T) {
	const other = `{"to":"ana@example.com","subject":"Lunch","body":"Change of plan: 1 pm."}`
	for _, failover := range []bool{false, true} {
		name := "no failover"
		if failover {
			name = "in the window"
		}
		t.Run(name, func(t *testing.T) {
			store := pgtest.Open(t)
			w := &foundWire{}
			clk := &clock{now: time.Now()}
			tool, op := toolAndOperator(t, w.send, agenttool.Options{
				Store: store, Class: agenttool.Reconcilable, Reconciler: reconcile.Func(w.check), Now: clk.Now,
				IdentifyingFields: []string{"to", "subject"},
			})
			first := foundNotApplied(t, tool, op, clk, lunch)
			before, err := store.Get(context.Background(), first.RequestRef)
			if err != nil || before.State != agenttool.Unknown || !before.RetryApproved {
				t.Fatalf("after the finding: %+v, %v; want unknown, approved", before, err)
			}
			if failover {
				fb := failBack{store, first.RequestRef}
				fb.snapshot(t)
				fb.failOver(t) // the standby had every write: only the timeline moves
			}
			clk.Advance(time.Second)

			env := tool.Invoke(scoped(), other)
			if env.RequestRef != first.RequestRef {
				t.Fatalf("the other wording has reference %s, want %s (same key)", env.RequestRef, first.RequestRef)
			}
			if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != "key_reused_with_different_input" {
				t.Errorf("the same action with another body: %s; want definite_failure key_reused_with_different_input (I5)", env)
			}
			if n := w.sent(first.RequestRef); n != 0 {
				t.Errorf("the other input's email was sent %d times (%v) under the approved action's key", n, w.delivered[first.RequestRef])
			}
			after, err := store.Get(context.Background(), first.RequestRef)
			if err != nil || after.Fingerprint != before.Fingerprint || after.State != agenttool.Unknown || !after.RetryApproved {
				t.Errorf("the approved record after the other input: state %v approved %v fingerprint changed %v (%v); want untouched",
					after.State, after.RetryApproved, after.Fingerprint != before.Fingerprint, err)
			}
			// In the window the approved attempt may have run on the old
			// primary: the destination is asked first (unknown while it
			// may land). Either way, the envelope tells the truth.
			again := tool.Invoke(scoped(), lunch)
			mustBeTrue(t, "the approved action asked for again", again, w, store)
			if !failover && (again.Status != envelope.Success || w.sent(first.RequestRef) != 1) {
				t.Errorf("the approved action asked for again: %s; want it sent once, under its approval", again)
			}
		})
	}
}

// droppingWire drops its first drops requests (never delivered,
// reply lost) and delivers the later ones.
type droppingWire struct {
	mu        sync.Mutex
	drops     int
	delivered map[string]int
}

func (w *droppingWire) send(ctx context.Context, in emailInput) (sent, error) {
	ref := agenttool.RequestRef(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.drops > 0 {
		w.drops--
		return sent{}, errLostReply
	}
	if w.delivered == nil {
		w.delivered = map[string]int{}
	}
	w.delivered[ref]++
	return sent{MessageID: "<" + ref + ">"}, nil
}

// A late answer (SettleByAnswer, applied) settles a replaced action (X, found not applied, then
// replaced by its rewording Y, itself found not applied) on a pgstore that
// accepts asynchronous standbys, within the failover window: the settling
// claims X in Y's place (operator.go), as it does outside the window.
func TestFailover_AnAppliedAnswerSettlesAReplacedAction(t *testing.T) {
	for _, failover := range []bool{false, true} {
		name := "no failover"
		if failover {
			name = "in the window"
		}
		t.Run(name, func(t *testing.T) {
			url := pgtest.URL(t)
			store, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: pgtest.Schema(t, url), AcceptAsyncStandbys: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			w := &droppingWire{drops: 2}
			clk := &clock{now: time.Now()}
			tool, op := toolAndOperator(t, w.send, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Now: clk.Now})
			x := foundNotApplied(t, tool, op, clk, lunch)
			y := foundNotApplied(t, tool, op, clk, lunchReworded)
			if rec, err := store.Get(context.Background(), x.RequestRef); err != nil || rec.State != agenttool.Failed || rec.ReplacedBy != y.RequestRef {
				t.Fatalf("X: %+v %v; want failed, replaced by Y", rec, err)
			}
			if failover {
				fb := failBack{store, x.RequestRef}
				fb.snapshot(t)
				fb.failOver(t)
			}
			clk.Advance(time.Second)
			_, err = op.SettleByAnswer(context.Background(), x.RequestRef, 1, reconcile.AppliedWith([]byte(`{"message_id":"late"}`)), "late answer")
			xr, _ := store.Get(context.Background(), x.RequestRef)
			yr, _ := store.Get(context.Background(), y.RequestRef)
			if err != nil {
				t.Errorf("a late answer that X applied (SettleByAnswer): %v, want it settled as outside the window; X is now %v (replaces %q), Y %v (replaced by %q)", err, xr.State, xr.Replaces, yr.State, yr.ReplacedBy)
			}
		})
	}
}

// toolAndOperator returns a send_email tool sending with send, whose one
// attempt may land for 30 s (and a second of clock skew), and an operator
// of it.
func toolAndOperator(t *testing.T, send func(context.Context, emailInput) (sent, error), opts agenttool.Options) (*agenttool.Tool, *agenttool.Operator) {
	t.Helper()
	opts.AttemptTimeout, opts.ClockSkew, opts.Retry = 30*time.Second, time.Second, agenttool.RetryPolicy{MaxAttempts: 1}
	tool, err := agenttool.New("send_email", "Send an email.", send, opts)
	if err != nil {
		t.Fatal(err)
	}
	op, err := agenttool.NewOperator(opts.Store, tool)
	if err != nil {
		t.Fatal(err)
	}
	return tool, op
}

// foundNotApplied calls tool with in, whose outcome is unknown, and has a
// person find it not applied once its attempt can no longer land.
func foundNotApplied(t *testing.T, tool *agenttool.Tool, op *agenttool.Operator, clk *clock, in string) envelope.Envelope {
	t.Helper()
	env := tool.Invoke(scoped(), in)
	mustStatus(t, env, envelope.UnknownOutcome)
	clk.Advance(32 * time.Second)
	if err := op.ResolveNotApplied(context.Background(), env.RequestRef, 1, "maria", "not in the mail log"); err != nil {
		t.Fatal(err)
	}
	return env
}
