package agenttool_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// replayingAPI is a keyed destination shared by callers that keep separate
// stores: it applies each idempotency key once and says when it replays.
type replayingAPI struct {
	done map[string]bool
	// fail gives, for the n-th request (from 1), an error returned before
	// (lost is false) or after (lost is true) the request is applied.
	fail func(n int) (lost bool, err error)
	n    int
}

func (a *replayingAPI) book(ctx context.Context, key string) (string, error) {
	a.n++
	var err error
	lost := false
	if a.fail != nil {
		lost, err = a.fail(a.n)
	}
	if err != nil && !lost {
		return "", err
	}
	replayed := a.done[key]
	a.done[key] = true
	if replayed {
		agenttool.DestinationReplayed(ctx)
	}
	if err != nil {
		return "", err
	}
	return "BK-1001", nil
}

func bookingTool(t *testing.T, api *replayingAPI, key string) *agenttool.Tool {
	t.Helper()
	tool, err := agenttool.New("book_flight", "Book one seat.", func(ctx context.Context, in struct {
		Flight string `json:"flight"`
	}) (string, error) {
		return api.book(ctx, key)
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// A destination that replays another caller's request is told as a
// replay: this call did nothing, the effect happened once before it.
func TestDestinationReplayOfAnotherRequestSaysReplayed(t *testing.T) {
	api := &replayingAPI{done: map[string]bool{}}
	first := bookingTool(t, api, "seat-1").Invoke(scoped(), `{"flight":"TP1234"}`)
	if first.Status != envelope.Success || first.Replayed || first.Note != "" {
		t.Fatalf("first: %s; want a fresh success", first)
	}
	other := bookingTool(t, api, "seat-1") // another replica, another store
	second := other.Invoke(scoped(), `{"flight":"TP1234"}`)
	if second.Status != envelope.Success || !second.Replayed || second.Attempts != 1 || !strings.Contains(second.Note, "Nothing was repeated") {
		t.Errorf("second: %s; want success, replayed, with a note that nothing was repeated", second)
	}
	again := other.Invoke(scoped(), `{"flight":"TP1234"}`)
	if !again.Replayed || again.Note != second.Note || string(again.Result) != string(second.Result) {
		t.Errorf("from the store: %s; want the same replay", again)
	}
	// An attempt that failed before sending does not make the replay the
	// call's own.
	api.fail = func(n int) (bool, error) {
		if n == 3 {
			return false, envelope.MarkTransient(errors.New("dial tcp: connection refused"))
		}
		return false, nil
	}
	third := bookingTool(t, api, "seat-1").Invoke(scoped(), `{"flight":"TP1234"}`)
	if third.Status != envelope.Success || !third.Replayed || third.Attempts != 2 {
		t.Errorf("after an unsent attempt: %s; want success, replayed, 2 attempts", third)
	}
}

// After an attempt of its own that may have acted, the destination's
// replay is that attempt's: an ordinary success.
func TestDestinationReplayOfTheCallsOwnAttemptIsASuccess(t *testing.T) {
	api := &replayingAPI{done: map[string]bool{}, fail: func(n int) (bool, error) {
		if n == 1 {
			return true, errors.New("read: connection reset by peer") // applied, reply lost
		}
		return false, nil
	}}
	env := bookingTool(t, api, "seat-1").Invoke(scoped(), `{"flight":"TP1234"}`)
	if env.Status != envelope.Success || env.Replayed || env.Attempts != 2 || env.Note != "" {
		t.Errorf("answered %s; want an ordinary success after 2 attempts", env)
	}
}

// Outside a guarded attempt, DestinationReplayed does nothing.
func TestDestinationReplayedOutsideACall(t *testing.T) {
	agenttool.DestinationReplayed(context.Background())
	agenttool.DestinationReplayed(scoped())
}

// A retry an operator approved after an unknown outcome meets the
// destination's replay of the earlier attempt, which did land: an
// ordinary success, not another caller's request.
func TestDestinationReplayAfterAnApprovedRetryIsASuccess(t *testing.T) {
	api := &replayingAPI{done: map[string]bool{}, fail: func(n int) (bool, error) {
		if n == 1 {
			return true, errors.New("read: connection reset by peer") // applied, reply lost
		}
		return false, nil
	}}
	store := memstore.New()
	tool, err := agenttool.New("book_flight", "Book one seat.", func(ctx context.Context, in struct {
		Flight string `json:"flight"`
	}) (string, error) {
		return api.book(ctx, "seat-1")
	}, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	first := tool.Invoke(scoped(), `{"flight":"TP1234"}`)
	if first.Status != envelope.UnknownOutcome {
		t.Fatalf("first: %s; want unknown_outcome", first)
	}
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.ResolveNotApplied(context.Background(), first.RequestRef, first.Attempts, "maria", "not in the airline's list yet"); err != nil {
		t.Fatal(err)
	}
	again := tool.Invoke(scoped(), `{"flight":"TP1234"}`)
	if again.Status != envelope.Success || again.Replayed || again.Note != "" {
		t.Errorf("the approved retry answered %s; want an ordinary success", again)
	}
}

// A destination's replay after the call's own attempt was proven not applied
// is told as replayed.
//
// DestinationReplayed promises a replayed success "unless an
// attempt of its own may have landed first". Here the call's own first
// attempt is proven absent by the destination (reconcile.NotAppliedFenced,
// "trusted at once": it fences stale requests), so what the destination
// replays on attempt 2 can only be another caller's request; the envelope
// was an ordinary success, replayed false, no note, telling the model this
// call booked the seat.
func TestReplayed_AfterOwnAttemptProvenNotApplied(t *testing.T) {
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
