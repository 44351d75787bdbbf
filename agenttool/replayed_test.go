package agenttool_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
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

// A destination's replay is told as an earlier call's only when the
// action's record proves that an earlier call attempted it. With no such
// record, the replayed request can be this call's own — resent by a
// transport or a proxy the tool never saw — and the envelope is an
// ordinary success: the effect happened once, and nothing says it was
// before this call. (A replica with a store of its own sharing the
// destination's keys is such a case: it cannot tell either.)
func TestDestinationReplayIsAnEarlierCallsOnlyWhenTheRecordSaysSo(t *testing.T) {
	api := &replayingAPI{done: map[string]bool{}}
	first := bookingTool(t, api, "seat-1").Invoke(scoped(), `{"flight":"TP1234"}`)
	if first.Status != envelope.Success || first.Replayed || first.Note != "" {
		t.Fatalf("first: %s; want a fresh success", first)
	}
	other := bookingTool(t, api, "seat-1") // no record of the first in its store
	second := other.Invoke(scoped(), `{"flight":"TP1234"}`)
	if second.Status != envelope.Success || second.Replayed || second.Attempts != 1 || second.Note != "" {
		t.Errorf("second: %s; want an ordinary success: no record says an earlier call sent it", second)
	}
	again := other.Invoke(scoped(), `{"flight":"TP1234"}`)
	if !again.Replayed || string(again.Result) != string(second.Result) {
		t.Errorf("from the store: %s; want the recorded outcome, replayed", again)
	}
	// An attempt of this call's own, proven not applied, does not make
	// the replay an earlier call's either.
	api.fail = func(n int) (bool, error) {
		if n == 3 {
			return false, envelope.MarkTransient(errors.New("dial tcp: connection refused"))
		}
		return false, nil
	}
	third := bookingTool(t, api, "seat-1").Invoke(scoped(), `{"flight":"TP1234"}`)
	if third.Status != envelope.Success || third.Replayed || third.Attempts != 2 {
		t.Errorf("after an unsent attempt: %s; want an ordinary success, 2 attempts", third)
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
// destination's replay of the earlier call's attempt, which did land: the
// record proves that attempt, and the envelope says replayed — it was done
// for an earlier request, and not repeated.
func TestDestinationReplayAfterAnApprovedRetryIsTheEarlierCalls(t *testing.T) {
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
	}, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Retry: fastRetry, ClockSkew: -1})
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
	if again.Status != envelope.Success || !again.Replayed || !strings.Contains(again.Note, "earlier request") {
		t.Errorf("the approved retry answered %s; want a success, replayed, for the earlier request", again)
	}
}

// A destination's replay of an action done before the key's record
// expired is an earlier call's whether or not the sweeper has deleted the
// record yet: the same script gives the same envelope.
//
// A keyed booking is done; its record lives KeyTTL (an hour), the
// airline keeps idempotency keys for a day. Two hours later the same
// request comes again: a new action to the store, the same key to the
// airline, which replays the booking (no second seat). With the expired
// record still in the store (Expired), the envelope says replayed, "done
// for an earlier request". After a sweep, the same call is an ordinary
// success, replayed false: the model reads that it booked a seat now,
// and no seat was booked now.
func TestDestinationReplayIsAnEarlierCallsOnlyWhenTheRecordSaysSo_SweptOrNot(t *testing.T) {
	for _, sweep := range []bool{false, true} {
		t.Run(map[bool]string{false: "expired record in the store", true: "expired record swept"}[sweep], func(t *testing.T) {
			clk := newClock()
			store := memstore.New()
			api := &replayingAPI{done: map[string]bool{}}
			tool, err := agenttool.New("book_flight", "Book one seat.", func(ctx context.Context, in struct {
				Flight string `json:"flight"`
			}) (string, error) {
				return api.book(ctx, agenttool.RequestRef(ctx))
			}, agenttool.Options{Store: store, Class: agenttool.Keyed, Retry: fastRetry, Now: clk.Now, KeyTTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			first := tool.Invoke(scoped(), `{"flight":"TP1234"}`)
			mustStatus(t, first, envelope.Success)
			clk.Advance(2 * time.Hour)
			if sweep {
				op, err := agenttool.NewOperator(store, tool)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			again := tool.Invoke(scoped(), `{"flight":"TP1234"}`)
			t.Logf("two hours later: %s", again)
			if again.Status != envelope.Success || !again.Replayed {
				t.Errorf("the airline replayed the booking made two hours ago (no seat was booked now): %s; want success, replayed", again)
			}
		})
	}
}
