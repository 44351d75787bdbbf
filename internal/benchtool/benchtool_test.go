package benchtool

import (
	"context"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
)

// A Steady store stays the size of a store swept at its key lifetime:
// about Live records however many calls it takes, so that a benchmark of
// it measures a call, not a store that grows with the benchmark's length.
func TestSteadyStoreStaysItsSize(t *testing.T) {
	s := NewSteady()
	ctx := agenttool.WithScope(context.Background(), "tenant/user", "conversation")
	for i := int64(1); i <= 4*Live; i++ {
		if env := s.Invoke(ctx, i); env.Status != "success" {
			t.Fatalf("call %d: %+v", i, env)
		}
	}
	if n := s.store.Len(); n < Live/2 || n > Live+Live/8 {
		t.Errorf("after %d calls the store holds %d records, want about %d", 4*Live, n, Live)
	}
}
