package reconcile_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// sequence answers with the given answers in turn, then the last one.
func sequence(answers ...reconcile.Answer) (reconcile.Reconciler, *atomic.Int64) {
	var n atomic.Int64
	return reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		i := int(n.Add(1)) - 1
		return answers[min(i, len(answers)-1)]
	}), &n
}

var quick = reconcile.PollOptions{Interval: time.Millisecond, MaxInterval: 2 * time.Millisecond}

func TestPollWaitsOutPending(t *testing.T) {
	r, n := sequence(reconcile.StillPending(), reconcile.StillPending(), reconcile.AppliedWith([]byte(`{"id":7}`)))
	a := reconcile.Poll(r, quick).Check(context.Background(), reconcile.Request{Ref: "book/x"})
	if a.Verdict != reconcile.Applied || string(a.Result) != `{"id":7}` || n.Load() != 3 {
		t.Errorf("answer %+v after %d checks", a, n.Load())
	}
}

func TestPollIsBounded(t *testing.T) {
	r, n := sequence(reconcile.StillPending())
	a := reconcile.Poll(r, reconcile.PollOptions{MaxChecks: 4, Interval: time.Millisecond}).Check(context.Background(), reconcile.Request{Ref: "x"})
	if a.Verdict != reconcile.Pending || n.Load() != 4 {
		t.Errorf("answer %v after %d checks, want pending after 4", a.Verdict, n.Load())
	}
	r, n = sequence(reconcile.StillPending())
	start := time.Now()
	reconcile.Poll(r, reconcile.PollOptions{MaxChecks: 1000, Interval: 5 * time.Millisecond, MaxWait: 30 * time.Millisecond}).Check(context.Background(), reconcile.Request{Ref: "x"})
	if n.Load() >= 1000 || time.Since(start) > 5*time.Second {
		t.Errorf("MaxWait did not bound polling: %d checks", n.Load())
	}
}

func TestPollRetriesOnlyTransientErrors(t *testing.T) {
	transient := reconcile.CantSayBecause(envelope.MarkTransient(errors.New("503 from status API")))
	r, n := sequence(transient, reconcile.NotAppliedYet())
	if a := reconcile.Poll(r, quick).Check(context.Background(), reconcile.Request{Ref: "x"}); a.Verdict != reconcile.NotApplied || n.Load() != 2 {
		t.Errorf("after a transient error: %v in %d checks", a.Verdict, n.Load())
	}
	definite := reconcile.CantSayBecause(envelope.MarkDefinite(errors.New("401 unauthorized"), ""))
	r, n = sequence(definite, reconcile.NotAppliedYet())
	if a := reconcile.Poll(r, quick).Check(context.Background(), reconcile.Request{Ref: "x"}); a.Verdict != reconcile.CantSay || n.Load() != 1 || a.Err == nil {
		t.Errorf("after a definite error: %+v in %d checks", a, n.Load())
	}
}

func TestPollStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := reconcile.Func(func(context.Context, string) reconcile.Answer { cancel(); return reconcile.StillPending() })
	done := make(chan reconcile.Answer)
	go func() {
		done <- reconcile.Poll(r, reconcile.PollOptions{Interval: time.Hour, MaxWait: 2 * time.Hour}).Check(ctx, reconcile.Request{Ref: "x"})
	}()
	select {
	case a := <-done:
		if a.Verdict != reconcile.Pending {
			t.Errorf("answer %v", a.Verdict)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Poll kept waiting after its context ended")
	}
}

func TestAnswers(t *testing.T) {
	if a := reconcile.AppliedWith([]byte("250 OK queued as 12345")); string(a.Result) != `"250 OK queued as 12345"` {
		t.Errorf("a non-JSON result is carried as a JSON string, got %s", a.Result)
	}
	if a := reconcile.CantSayBecause(nil); a.Err == nil {
		t.Error("CantSay without a reason has no error")
	}
	if a := reconcile.NotAppliedFenced(); a.Verdict != reconcile.NotApplied || !a.Fenced || reconcile.NotAppliedYet().Fenced {
		t.Errorf("NotAppliedFenced = %+v; only it vouches that nothing in flight can land", a)
	}
	var zero reconcile.Answer
	if zero.Verdict != reconcile.CantSay {
		t.Error("the zero answer must say nothing")
	}
	for v, want := range map[reconcile.Verdict]string{reconcile.Applied: "applied", reconcile.NotApplied: "not applied", reconcile.Pending: "pending", reconcile.CantSay: "can't say"} {
		if v.String() != want {
			t.Errorf("%d.String() = %q", v, v.String())
		}
	}
}

// TestImportsOnlyEnvelope keeps reconcile light: the standard library and
// the envelope package, never langchaingo.
func TestImportsOnlyEnvelope(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/retrysafe/retrysafe/reconcile" && p != "github.com/retrysafe/retrysafe/envelope" {
			t.Errorf("reconcile depends on %s", p)
		}
	}
}
