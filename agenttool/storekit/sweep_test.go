package storekit

import (
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
