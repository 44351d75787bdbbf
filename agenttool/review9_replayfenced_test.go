package agenttool_test

import (
	"context"
	"errors"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// DestinationReplayed promises a replayed success "unless an
// attempt of its own may have landed first". Here the call's own first
// attempt is proven absent by the destination (reconcile.NotAppliedFenced,
// "trusted at once": it fences stale requests), so what the destination
// replays on attempt 2 can only be another caller's request; the envelope
// was an ordinary success, replayed false, no note, telling the model this
// call booked the seat.
func TestReview9_ReplayAfterProvenNotAppliedIsToldAsReplayed(t *testing.T) {
	api := &replayingAPI{done: map[string]bool{"seat-1": true}} // another caller booked seat-1 before
	n := 0
	tool, err := agenttool.New("book_flight", "Book one seat.", func(ctx context.Context, in struct {
		Flight string `json:"flight"`
	}) (string, error) {
		n++
		if n == 1 {
			// Lost before the destination saw it; the client cannot tell.
			return "", errors.New("read: connection reset by peer")
		}
		return api.book(ctx, "seat-1")
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Retry: fastRetry,
		Reconciler: reconcile.Func(func(context.Context, string) reconcile.Answer { return reconcile.NotAppliedFenced() })})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), `{"flight":"TP1234"}`)
	t.Logf("%s", env)
	if env.Status != envelope.Success {
		t.Fatalf("status %s", env.Status)
	}
	if !env.Replayed {
		t.Errorf("the destination replayed another caller's booking (this call's own attempt was proven not applied), but the envelope is a fresh success: replayed=%v note=%q", env.Replayed, env.Note)
	}
}
