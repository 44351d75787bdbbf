package agenttool_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

type traceKey struct{}

// journal records every hook as one line, and checks that each hook gets
// the context its call's Start returned.
type journal struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(ctx context.Context, format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if ctx.Value(traceKey{}) == nil {
		j.t.Errorf("hook %q did not get the context Start returned", fmt.Sprintf(format, args...))
	}
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
}

func (j *journal) String() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.lines, "\n")
}

func (j *journal) hooks() agenttool.Hooks {
	return agenttool.Hooks{
		Start: func(ctx context.Context, e agenttool.StartEvent) context.Context {
			ctx = context.WithValue(ctx, traceKey{}, e.Tool)
			j.add(ctx, "start %s %v", e.Tool, e.Class)
			return ctx
		},
		Claimed: func(ctx context.Context, e agenttool.ClaimedEvent) {
			j.add(ctx, "claimed took-over=%v attempts=%d", e.TookOver, e.Attempts)
		},
		Attempt: func(ctx context.Context, e agenttool.AttemptEvent) {
			j.add(ctx, "attempt %d err=%v", e.Attempt, e.Err != nil)
		},
		Retry: func(ctx context.Context, e agenttool.RetryEvent) {
			j.add(ctx, "retry after %d (%v)", e.Attempt, envelope.Classify(e.Err))
		},
		Replayed: func(ctx context.Context, e agenttool.ReplayedEvent) { j.add(ctx, "replayed %v", e.State) },
		Waited:   func(ctx context.Context, e agenttool.WaitedEvent) { j.add(ctx, "waited gave-up=%v", e.GaveUp) },
		Reconcile: func(ctx context.Context, e agenttool.ReconcileEvent) {
			if ctx.Value(traceKey{}) == nil { // a sweeper's or operator's check has no call
				ctx = context.WithValue(ctx, traceKey{}, "")
			}
			j.add(ctx, "reconcile %v by %s", e.Verdict, e.By)
		},
		Fenced: func(ctx context.Context, e agenttool.FencedEvent) {
			j.add(ctx, "fenced by %s (%s)", e.Earlier[:4], e.EarlierState)
		},
		Unknown: func(ctx context.Context, e agenttool.UnknownEvent) { j.add(ctx, "unknown attempts=%d", e.Attempts) },
		Approval: func(ctx context.Context, e agenttool.ApprovalEvent) {
			j.add(ctx, "approval %v by %q", e.Decision, e.By)
		},
		Outcome: func(ctx context.Context, e agenttool.OutcomeEvent) {
			j.add(ctx, "outcome %s replayed=%v (%v)", e.Envelope.Status, e.Envelope.Replayed, e.Class)
		},
	}
}

// The hooks tell the life of each call, in order, with the call's context.
func TestHooksTellTheLifeOfACall(t *testing.T) {
	ctx := scoped()
	cases := []struct {
		name string
		run  func(h agenttool.Hooks)
		want string
	}{
		{"a retried success, then a replay", func(h agenttool.Hooks) {
			m := &mailServer{script: func(n int) (bool, error) {
				if n == 1 {
					return false, envelope.MarkTransient(errors.New("421 try later"))
				}
				return true, nil
			}}
			tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Hooks: h})
			tool.Invoke(ctx, emailToAna)
			tool.Invoke(ctx, emailToAna)
		}, `start send_email keyed
claimed took-over=false attempts=0
attempt 1 err=true
retry after 1 (transient)
attempt 2 err=false
outcome success replayed=false (keyed)
start send_email keyed
replayed succeeded
outcome success replayed=true (keyed)`},
		{"an unknown outcome, reconciled later by a repeat", func(h agenttool.Hooks) {
			m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
			answers := &answers{answer: reconcile.StillPending()}
			tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: answers, Hooks: h})
			tool.Invoke(ctx, emailToAna)
			answers.set(reconcile.AppliedWith(nil))
			tool.Invoke(ctx, emailToAna)
		}, `start send_email reconcilable
claimed took-over=false attempts=0
attempt 1 err=true
reconcile pending by reconciler
unknown attempts=1
outcome unknown_outcome replayed=false (reconcilable)
start send_email reconcilable
claimed took-over=true attempts=1
reconcile applied by reconciler
outcome success replayed=false (reconcilable)`},
		{"a reworded action held back by the fence", func(h agenttool.Hooks) {
			m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
			tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable,
				Reconciler: fixed(reconcile.StillPending()), Hooks: h})
			tool.Invoke(ctx, lunch)
			tool.Invoke(ctx, lunchReworded)
		}, `start send_email reconcilable
claimed took-over=false attempts=0
attempt 1 err=true
reconcile pending by reconciler
unknown attempts=1
outcome unknown_outcome replayed=false (reconcilable)
start send_email reconcilable
reconcile pending by fence
fenced by send (unknown)
outcome unknown_outcome replayed=false (reconcilable)`},
		{"an approver asked about an unknown outcome", func(h agenttool.Hooks) {
			m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
			tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce, Hooks: h,
				Approver: agenttool.ApproverFunc(func(context.Context, agenttool.ApprovalRequest) (agenttool.Approval, error) {
					return agenttool.Approval{}, nil
				})})
			tool.Invoke(ctx, emailToAna)
			tool.Invoke(ctx, emailToAna)
		}, `start send_email at-most-once
claimed took-over=false attempts=0
attempt 1 err=true
unknown attempts=1
outcome unknown_outcome replayed=false (at-most-once)
start send_email at-most-once
approval undecided by ""
outcome unknown_outcome replayed=true (at-most-once)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{t: t}
			tc.run(j.hooks())
			if got := j.String(); got != tc.want {
				t.Errorf("hooks:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// The tool runs with the context Start returned: a tracing adapter's span
// is the parent of the tool's own.
func TestStartContextReachesTheTool(t *testing.T) {
	var seen any
	tool, err := agenttool.New("send_email", "", func(ctx context.Context, in emailInput) (string, error) {
		seen = ctx.Value(traceKey{})
		return "ok", nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Hooks: agenttool.Hooks{
		Start: func(ctx context.Context, e agenttool.StartEvent) context.Context {
			return context.WithValue(ctx, traceKey{}, "span-1")
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, tool.Invoke(scoped(), emailToAna), envelope.Success)
	if seen != "span-1" {
		t.Errorf("the tool saw %v on its context", seen)
	}
}

// Unset hooks cost nothing: a call allocates as much with a hook that never
// fires on its path as with none. .ci/run runs it without the race
// detector too, where allocations can be counted.
func TestUnsetHooksDoNotAllocate(t *testing.T) {
	if raceDetector {
		t.Skip("allocations are not counted under the race detector (sync.Pool drops items at random); .ci/run runs this test without it")
	}
	m := &mailServer{}
	bare := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	hooked := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Hooks: agenttool.Hooks{
		Retry: func(context.Context, agenttool.RetryEvent) { t.Error("no retry was expected") },
	}})
	ctx := scoped()
	n := 0
	call := func(tool *agenttool.Tool) func() {
		return func() {
			n++
			tool.Invoke(ctx, fmt.Sprintf(`{"to":"u%d@example.com","subject":"s"}`, n))
		}
	}
	a, b := testing.AllocsPerRun(200, call(bare)), testing.AllocsPerRun(200, call(hooked))
	if b > a {
		t.Errorf("a call with an unset hook allocates %.1f times, %.1f without hooks", b, a)
	}
}

// Every envelope that says the call was held back by an earlier action comes
// with a Fenced event naming both.
//
// The same turn, watched through Options.Hooks: every envelope that says
// the call was held back by an earlier action (earlier_action_unknown,
// earlier_action_applied) should come with a Fenced event naming the call
// and that earlier action (observe.Log turns it into the WARN "held back by
// an earlier action" the README tells operators to watch for).
func TestHooks_HeldBackComesWithAFencedEvent(t *testing.T) {
	g := newGatedMail(2)
	ans := &answers{answer: reconcile.StillPending()}
	var mu sync.Mutex
	var fenced []agenttool.FencedEvent
	var outcomes []envelope.Envelope
	hooks := agenttool.Hooks{
		Fenced: func(_ context.Context, e agenttool.FencedEvent) { mu.Lock(); fenced = append(fenced, e); mu.Unlock() },
		Outcome: func(_ context.Context, e agenttool.OutcomeEvent) {
			mu.Lock()
			outcomes = append(outcomes, e.Envelope)
			mu.Unlock()
		},
	}
	tool := newEmailTool(t, g.mailServer, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: ans,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 50 * time.Millisecond, Hooks: hooks})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	ans.set(reconcile.NotAppliedFenced())
	done := make(chan struct{})
	go func() { defer close(done); tool.Invoke(scoped(), lunchRephrased) }()
	<-g.started
	tool.Invoke(scoped(), lunch)
	close(g.gate)
	<-done
	mu.Lock()
	defer mu.Unlock()
	for _, env := range outcomes {
		if env.Error == nil || (env.Error.Code != envelope.CodeEarlierUnknown && env.Error.Code != envelope.CodeEarlierApplied) {
			continue
		}
		found := false
		for _, f := range fenced {
			found = found || (f.RequestRef == env.RequestRef && env.Earlier != nil && f.Earlier == env.Earlier.RequestRef)
		}
		if !found {
			t.Errorf("outcome %s says the call was held back (%s), but no Fenced event names %s (events: %+v)", env.RequestRef, env.Error.Code, env.RequestRef, fenced)
		}
	}
}
