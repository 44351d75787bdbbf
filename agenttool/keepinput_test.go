package agenttool_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// A destination that never saw the request reference (a third-party
// server) can only be asked by what the action asked for: a tool with
// KeepInput keeps its action's input with the record while the outcome
// may be unknown, and the reconciler gets it — also in another process,
// after a restart, from an operator's or a sweeper's reconcile — and the
// record keeps it no longer than it is unknown.
func TestKeepInput_TheReconcilerFindsTheActionByItsInputAfterARestart(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		clk := newClock()
		var mu sync.Mutex
		outbox := map[string]bool{} // the destination: messages by their text, no reference
		asked := [][]byte{}
		checker := reconcile.RequestFunc(func(_ context.Context, req reconcile.Request) reconcile.Answer {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, req.Input)
			if outbox[string(req.Input)] {
				return reconcile.AppliedWith([]byte(`"found by its text"`))
			}
			return reconcile.StillPending()
		})
		type msg struct {
			To   string `json:"to"`
			Text string `json:"text"`
		}
		lose := true
		send := func(ctx context.Context, m msg) (string, error) {
			mu.Lock()
			outbox[`{"text":"`+m.Text+`","to":"`+m.To+`"}`] = true
			mu.Unlock()
			if lose {
				return "", errLostReply
			}
			return "sent", nil
		}
		build := func(r reconcile.Reconciler) *agenttool.Tool {
			tool, err := agenttool.New("post", "Post a message.", send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
				Reconciler: r, KeepInput: true, Now: clk.Now, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
			if err != nil {
				t.Fatal(err)
			}
			return tool
		}
		first := build(reconcile.Func(func(context.Context, string) reconcile.Answer { return reconcile.StillPending() }))
		env := first.Invoke(scoped(), `{"to":"#team","text":"Lunch at one?"}`)
		mustStatus(t, env, envelope.UnknownOutcome)
		rec, err := store.Get(context.Background(), env.RequestRef)
		if err != nil || string(rec.Input) != `{"text":"Lunch at one?","to":"#team"}` {
			t.Fatalf("the unknown record keeps input %q, %v; want the canonical input", rec.Input, err)
		}

		// Another process, later: an operator's reconcile asks the
		// destination with the input the record kept.
		clk.Advance(time.Hour)
		later := build(checker)
		op, err := agenttool.NewOperator(store, later)
		if err != nil {
			t.Fatal(err)
		}
		verdict, err := op.Reconcile(context.Background(), env.RequestRef, "ops")
		if err != nil || verdict != reconcile.Applied {
			t.Fatalf("reconcile: %v, %v; want applied, found by the input", verdict, err)
		}
		if len(asked) == 0 || string(asked[len(asked)-1]) != `{"text":"Lunch at one?","to":"#team"}` {
			t.Errorf("the reconciler was asked with inputs %q", asked)
		}
		rec, err = store.Get(context.Background(), env.RequestRef)
		if err != nil || rec.State != agenttool.Succeeded || rec.Input != nil {
			t.Errorf("settled: state %v, input %q, %v; want succeeded, the input gone", rec.State, rec.Input, err)
		}
		if n := len(outbox); n != 1 {
			t.Errorf("%d messages", n)
		}
	})
}

// Without KeepInput the store keeps no input, and a reconciler is asked
// without one (I8).
func TestKeepInput_OffByDefault(t *testing.T) {
	store := memstore.New()
	var got []byte
	checker := reconcile.RequestFunc(func(_ context.Context, req reconcile.Request) reconcile.Answer {
		got = req.Input
		return reconcile.StillPending()
	})
	tool, err := agenttool.New("post", "Post a message.", func(context.Context, struct {
		Text string `json:"text"`
	}) (string, error) {
		return "", errLostReply
	}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: checker, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), `{"text":"Lunch at one?"}`)
	rec, err := store.Get(context.Background(), env.RequestRef)
	if err != nil || rec.Input != nil || got != nil {
		t.Errorf("without KeepInput: the record keeps %q (%v), the reconciler got %q; want neither", rec.Input, err, got)
	}
}

// With an InputCodec that encrypts (NewSealingCodec), the store holds the
// kept input sealed, bound to its record, and the reconciler reads it.
func TestKeepInput_SealedWithTheInputCodec(t *testing.T) {
	store := memstore.New()
	codec, err := agenttool.NewSealingCodec(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	tool, err := agenttool.New("post", "Post a message.", func(context.Context, struct {
		Text string `json:"text"`
	}) (string, error) {
		return "", errLostReply
	}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, KeepInput: true, InputCodec: codec,
		Reconciler: reconcile.Func(func(context.Context, string) reconcile.Answer { return reconcile.StillPending() }),
		Retry:      agenttool.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), `{"text":"CANARY-SEALED-INPUT"}`)
	rec, err := store.Get(context.Background(), env.RequestRef)
	if err != nil || len(rec.Input) == 0 || bytes.Contains(rec.Input, []byte("CANARY-SEALED-INPUT")) {
		t.Fatalf("the kept input %q, %v: want it sealed", rec.Input, err)
	}
	later, err := agenttool.New("post", "Post a message.", func(context.Context, struct {
		Text string `json:"text"`
	}) (string, error) {
		return "", errLostReply
	}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, KeepInput: true, InputCodec: codec,
		Reconciler: reconcile.RequestFunc(func(_ context.Context, req reconcile.Request) reconcile.Answer {
			got = req.Input
			return reconcile.StillPending()
		})})
	if err != nil {
		t.Fatal(err)
	}
	op, err := agenttool.NewOperator(store, later)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Reconcile(context.Background(), env.RequestRef, "ops"); err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"text":"CANARY-SEALED-INPUT"}` {
		t.Errorf("the reconciler read %q", got)
	}
	if _, err := agenttool.NewSealingCodec([]byte("short")); err == nil {
		t.Error("a 5-byte sealing key was taken")
	}
}
