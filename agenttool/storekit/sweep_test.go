package storekit

import (
	"context"
	"math"
	"testing"
	"time"
)

// Step sizes follow what a step costs: a store that pays by the record
// keeps its own step after one probe; one whose steps are mostly a fixed
// cost (a busy store, where a step waits for calls' commits) doubles them
// while that pays, up to SweepGrowth times the first, and while a step
// takes at most twice as long as the first.
func TestStepSizesGrowWhileTheyPay(t *testing.T) {
	ms := time.Millisecond
	perRecord := func(n int) time.Duration { return time.Duration(n) * 80 * time.Microsecond }
	busy := func(n int) time.Duration { return 15*ms + time.Duration(n)*100*time.Microsecond }
	fixedOnly := func(int) time.Duration { return 20 * ms }
	// Each doubling three quarters as dear per record: it pays, but the
	// steps get longer by half each time.
	threeQuarters := func(n int) time.Duration {
		return time.Duration(float64(10*ms) * math.Pow(1.5, math.Log2(float64(n)/50)))
	}
	tests := []struct {
		name string
		cost func(n int) time.Duration
		want []int // limits asked, from the second step on
	}{
		{"by the record", perRecord, []int{100, 50, 50, 50}},
		{"busy", busy, []int{100, 200, 400, 200, 200}},
		{"paying, but twice as long as the first", threeQuarters, []int{100, 200, 100, 100}},
		{"fixed cost", fixedOnly, []int{100, 200, 400, 400, 400}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s stepSizes
			asked, n := 0, 50 // the store's own step: 50
			var got []int
			for range tt.want {
				next := s.after(asked, n, tt.cost(n))
				got = append(got, next)
				asked, n = next, next // full steps: a backlog
			}
			for i := range tt.want {
				if got[i] != tt.want[i] {
					t.Fatalf("limits %v, want %v", got, tt.want)
				}
			}
		})
	}
	t.Run("a short step keeps the size", func(t *testing.T) {
		var s stepSizes
		s.after(0, 50, 20*ms)
		if got := s.after(100, 30, 20*ms); got != 100 {
			t.Errorf("after a short step: %d, want 100", got)
		}
	})
}

// groupSweeper deletes whole groups in a step of its own size (its count
// includes them) and at most max records one by one in any step.
type groupSweeper struct {
	Store
	groups, backlog, max int
	asked                []int
}

func (g *groupSweeper) MaxSweepStep() int { return g.max }

func (g *groupSweeper) Sweep(_ context.Context, req SweepRequest) (int, error) {
	g.asked = append(g.asked, req.Limit)
	n := 0
	limit := req.Limit
	if limit == 0 {
		n, g.groups, limit = g.groups, 0, 5
	}
	one := min(limit, g.max, g.backlog)
	g.backlog -= one
	return n + one, nil
}

// A store that bounds its steps (SweepStepBound) is never asked for more,
// however large a first step that dropped whole groups counted: each step
// it fills is full, so a sweep its budget stops says records are left.
func TestSweepStepsKeepToTheStoresBound(t *testing.T) {
	g := &groupSweeper{groups: 5000, backlog: 100, max: 10}
	steps := 0
	n, more, err := SweepExpired(context.Background(), g, SweepPlan{Now: time.Now(), Budget: time.Nanosecond, Eager: true,
		Progress: func(int) { steps++ }})
	if err != nil || steps != 1 || n != 5005 || !more {
		t.Fatalf("a sweep its budget stopped after the first step: %d deleted, more %v, %v; want 5005, more", n, more, err)
	}
	g = &groupSweeper{groups: 5000, backlog: 100, max: 10}
	n, err = SweepAll(context.Background(), g, time.Now(), 0, nil)
	if err != nil || n != 5100 {
		t.Fatalf("SweepAll: %d, %v; want 5100", n, err)
	}
	for i, a := range g.asked[1:] {
		if a > g.max || a <= 0 {
			t.Fatalf("step %d asked %d, above the store's bound %d (asked %v)", i+1, a, g.max, g.asked)
		}
	}
}
