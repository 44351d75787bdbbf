package agenttool_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// lateMail is a destination that accepts a request, answers with a lost
// reply at once, and delivers it a little later (within the in-flight
// window): a person who looks right after the unknown outcome sees nothing.
type lateMail struct {
	mu        sync.Mutex
	delivered map[string]int
	inflight  sync.WaitGroup
	maxDelay  time.Duration
	runs      map[string]int
}

func (m *lateMail) send(ctx context.Context, in emailInput) (sent, error) {
	ref := agenttool.RequestRef(ctx)
	m.mu.Lock()
	if m.runs == nil {
		m.runs, m.delivered = map[string]int{}, map[string]int{}
	}
	m.runs[ref]++
	m.mu.Unlock()
	d := time.Duration(rand.Int64N(int64(m.maxDelay)))
	m.inflight.Add(1)
	go func() {
		defer m.inflight.Done()
		time.Sleep(d)
		m.mu.Lock()
		m.delivered[ref]++
		m.mu.Unlock()
	}()
	return sent{}, errLostReply
}

func (m *lateMail) sent(ref string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.delivered[ref]
}

func (m *lateMail) check(_ context.Context, ref string) reconcile.Answer {
	if m.sent(ref) > 0 {
		return reconcile.AppliedWith([]byte(`{"message_id":"x"}`))
	}
	return reconcile.NotAppliedYet()
}

// TestOperator_TruthfulOperatorsRaceLiveCallsOnTwoPGReplicas: two replicas
// share one PostgreSQL schema, each with a sweeper; the model calls the
// same action (and reworded copies) on both; two operators settle what
// they see at the destination (which shows nothing while a request is
// still on its way). Every envelope must agree with the destination, and
// no reference is delivered twice.
func TestOperator_TruthfulOperatorsRaceLiveCallsOnTwoPGReplicas(t *testing.T) {
	open := pgReplicas(t)
	m := &lateMail{maxDelay: 300 * time.Millisecond}
	mk := func(store agenttool.Store) (*agenttool.Tool, *agenttool.Operator) {
		tool, err := agenttool.New("send_email", "Send an email.", m.send, agenttool.Options{
			Store: store, Class: agenttool.Reconcilable, Reconciler: reconcile.Func(m.check),
			AttemptTimeout: 500 * time.Millisecond, ClockSkew: 50 * time.Millisecond,
			Retry: agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		return tool, op
	}
	t1, op1 := mk(open())
	t2, op2 := mk(open())

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var bg sync.WaitGroup
	for _, op := range []*agenttool.Operator{op1, op2} {
		bg.Add(1)
		go func() {
			defer bg.Done()
			op.RunSweeper(ctx, agenttool.SweeperOptions{Interval: 40 * time.Millisecond})
		}()
	}
	type got struct {
		env envelope.Envelope
		in  string
	}
	var mu sync.Mutex
	var envs []got
	inputs := []string{lunch, lunchRephrased, lunchRephrased2, `{"to":"ANA@example.com","subject":"Lunch","body":"See you  at noon."}`}
	for _, tool := range []*agenttool.Tool{t1, t2, t1, t2} {
		bg.Add(1)
		go func() {
			defer bg.Done()
			for ctx.Err() == nil {
				in := inputs[rand.IntN(len(inputs))]
				e := tool.Invoke(scoped(), in)
				mu.Lock()
				envs = append(envs, got{e, in})
				mu.Unlock()
				time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
			}
		}()
	}
	var settleErrs sync.Map
	for i, op := range []*agenttool.Operator{op1, op2, op1} {
		bg.Add(1)
		go func() {
			defer bg.Done()
			for ctx.Err() == nil {
				recs, _ := op.Unknown(context.Background(), "", 0)
				for _, r := range recs {
					var err error
					if m.sent(r.Key) > 0 {
						err = op.ResolveApplied(context.Background(), r.Key, r.Attempts, nil, fmt.Sprint("op", i), "in the log")
					} else if rand.IntN(2) == 0 {
						err = op.ResolveNotApplied(context.Background(), r.Key, r.Attempts, fmt.Sprint("op", i), "not in the log")
					} else {
						_, err = op.SettleByAnswer(context.Background(), r.Key, r.Attempts, reconcile.NotAppliedYet(), fmt.Sprint("op", i))
					}
					if err != nil {
						for _, k := range []error{agenttool.ErrInFlight, agenttool.ErrBusy, agenttool.ErrStale, agenttool.ErrNotUnknown} {
							if errors.Is(err, k) {
								err = k
							}
						}
						n, _ := settleErrs.LoadOrStore(err.Error(), new(int))
						mu.Lock()
						*n.(*int)++
						mu.Unlock()
					}
				}
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			}
		}()
	}
	bg.Wait()
	m.inflight.Wait()
	settleErrs.Range(func(k, v any) bool { t.Logf("settle error %q x%d", k, *v.(*int)); return true })

	m.mu.Lock()
	for ref, n := range m.delivered {
		if n > 1 {
			t.Errorf("%s delivered %d times (runs %d)", ref, n, m.runs[ref])
		}
	}
	t.Logf("refs delivered: %d, runs %v", len(m.delivered), m.runs)
	m.mu.Unlock()
	counts := map[string]int{}
	for _, g := range envs {
		e := g.env
		counts[string(e.Status)+"/"+errCode(e)]++
		n := m.sent(e.RequestRef)
		switch e.Status {
		case envelope.Success:
			if n != 1 {
				t.Errorf("success for %s, delivered %d: %s", e.RequestRef, n, e)
			}
		case envelope.DefiniteFailure:
			if n != 0 && errCode(e) != string(envelope.CodeCompensated) && errCode(e) != "key_reused_with_different_input" {
				t.Errorf("definite_failure for %s, delivered %d: %s", e.RequestRef, n, e)
			}
		}
	}
	t.Logf("envelopes: %v", counts)
}

func errCode(e envelope.Envelope) string {
	if e.Error == nil {
		return ""
	}
	return string(e.Error.Code)
}

// TestOperator_OneRetryApprovedTwiceOnTwoReplicasRunsOnce: a person's
// "approve one retry" submitted twice at once (two replicas on one
// PostgreSQL schema) while the model's calls run on both: the tool runs
// once more, not twice.
func TestOperator_OneRetryApprovedTwiceOnTwoReplicasRunsOnce(t *testing.T) {
	open := pgReplicas(t)
	m := &mailServer{script: func(int) (bool, error) { return false, errLostReply }}
	var tools []*agenttool.Tool
	var ops []*agenttool.Operator
	for range 2 {
		s := open()
		tool := newEmailTool(t, m, agenttool.Options{Store: s, Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		op, err := agenttool.NewOperator(s, tool)
		if err != nil {
			t.Fatal(err)
		}
		tools, ops = append(tools, tool), append(ops, op)
	}
	first := tools[0].Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ops[i%2].ResolveNotApplied(context.Background(), first.RequestRef, 1, fmt.Sprint("op", i), "not in the log")
		}()
	}
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tools[i%2].Invoke(scoped(), lunch)
		}()
	}
	wg.Wait()
	for range 3 {
		tools[1].Invoke(scoped(), lunch)
	}
	if n := m.runs.Load(); n != 2 {
		t.Errorf("one retry approved (several times at once): the tool ran %d times, want 2; settle errors %v", n, errs)
	}
}

// TestOperator_CompensationRacesAnApprovedResend: one operator compensates
// while another approves one retry and the model calls on both replicas.
// If the compensation is recorded, no resend ran after it.
func TestOperator_CompensationRacesAnApprovedResend(t *testing.T) {
	open := pgReplicas(t)
	for round := range 5 {
		m := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
		var mu sync.Mutex
		var undone []int64
		var tools []*agenttool.Tool
		var ops []*agenttool.Operator
		for range 2 {
			s := open()
			tool := newEmailTool(t, m, agenttool.Options{Store: s, Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{MaxAttempts: 1},
				Compensate: func(context.Context, agenttool.CallInfo) error {
					mu.Lock()
					undone = append(undone, m.runs.Load())
					mu.Unlock()
					return nil
				}})
			op, _ := agenttool.NewOperator(s, tool)
			tools, ops = append(tools, tool), append(ops, op)
		}
		ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", fmt.Sprint("conv-", round))
		first := tools[0].Invoke(ctx, lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		var wg sync.WaitGroup
		var cerr, rerr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			cerr = ops[0].Compensate(context.Background(), first.RequestRef, 1, "a", "undo")
		}()
		go func() {
			defer wg.Done()
			rerr = ops[1].ResolveNotApplied(context.Background(), first.RequestRef, 1, "b", "retry")
		}()
		var envs []envelope.Envelope
		var emu sync.Mutex
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := tools[i%2].Invoke(ctx, lunch)
				emu.Lock()
				envs = append(envs, e)
				emu.Unlock()
			}()
		}
		wg.Wait()
		final := tools[0].Invoke(ctx, lunch)
		runs := m.runs.Load()
		if cerr == nil && rerr == nil {
			t.Errorf("round %d: both the compensation and the approval succeeded; runs %d, undone at %v", round, runs, undone)
		}
		if cerr == nil && (len(undone) != 1 || undone[0] != runs) {
			t.Errorf("round %d: compensated (after run %v), but the tool ran %d times", round, undone, runs)
		}
		if final.Status == envelope.DefiniteFailure && errCode(final) == string(envelope.CodeCompensated) && len(undone) == 1 && undone[0] != runs {
			t.Errorf("round %d: final says compensated, but a run came after the compensation: %s", round, final)
		}
		t.Logf("round %d: cerr=%v rerr=%v runs=%d undone=%v final=%s", round, cerr, rerr, runs, undone, final.Status)
	}
}
