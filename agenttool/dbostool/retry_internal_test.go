package dbostool

import (
	"math"
	"testing"
	"time"
)

// The window New counts is DBOS's backoff at the low end of its jitter,
// defaults applied as DBOS applies them, and counting stops at enough,
// however many retries there are.
func TestBackoffWindow(t *testing.T) {
	for _, tc := range []struct {
		o      Options
		enough time.Duration
		want   time.Duration
	}{
		{Options{StepRetries: 3}, time.Hour, 665 * time.Millisecond},                                      // (100+200+400)ms × 0.95
		{Options{StepRetries: 8}, time.Hour, 15485 * time.Millisecond},                                    // …+800+1600+3200, then 5s twice
		{Options{StepRetries: 0}, time.Hour, 0},                                                           // no retries, no wait
		{Options{StepRetries: 2, StepBaseInterval: 7 * time.Second}, time.Hour, 13300 * time.Millisecond}, // the ceiling rises to the base
		{Options{StepRetries: math.MaxInt, StepBaseInterval: time.Nanosecond, StepBackoffFactor: 1}, time.Minute, time.Minute},
		{Options{StepRetries: math.MaxInt}, time.Minute, time.Minute},
	} {
		if got := newBackoff(tc.o).window(tc.enough); got != tc.want {
			t.Errorf("%+v: window %v, want %v", tc.o, got, tc.want)
		}
	}
}
