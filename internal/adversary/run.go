package adversary

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// RunExample runs ex with the fault, driven by the adversary through the
// real executor, and fails t if the destination does not end with want
// effects or an envelope is untruthful (see [Check]).
func RunExample(t *testing.T, ex demo.Example, p Plan, fault string, want int) {
	t.Helper()
	ex.Script = func(string) demo.Script { return p.Script() }
	ex.MaxIterations = 2*len(p.Variants()) + 10
	var out bytes.Buffer
	args := []string{"-fault", fault, "-db", filepath.Join(t.TempDir(), "retrysafe.db")}
	sum, err := demo.Run(context.Background(), ex, args, &out, os.Getenv)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(sum.Envelopes) < len(p.Variants()) {
		t.Fatalf("the adversary made %d calls, want at least %d\n%s", len(sum.Envelopes), len(p.Variants()), out.String())
	}
	if bad := Check(sum.Envelopes, Effects{After: sum.EffectsAfter, Final: sum.Effects}, want); len(bad) > 0 {
		t.Errorf("%s\n\ntranscript:\n%s", strings.Join(bad, "\n"), out.String())
	} else if testing.Verbose() {
		t.Logf("transcript:\n%s", out.String())
	}
}

// RunParallel sets ex up with the fault and sends every variant of p to its
// tool at once, from as many goroutines; the destination must end with at
// most want effects, and no envelope may claim an effect that is missing.
func RunParallel(t *testing.T, ex demo.Example, p Plan, fault string, want int) {
	t.Helper()
	ctx := agenttool.WithScope(context.Background(), ex.Principal, ex.Session)
	if ex.Context != nil {
		ctx = ex.Context(ctx)
	}
	sc, err := ex.Setup(ctx, &demo.Env{Fault: fault, DB: filepath.Join(t.TempDir(), "retrysafe.db"), Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var tool *agenttool.Tool
	for _, tl := range sc.Tools {
		if tl.Name() == p.Tool {
			tool = tl
		}
	}
	variants := p.Variants() // the reworded request is another key: sent at once, it is another action
	envs := make([]envelope.Envelope, len(variants))
	var wg sync.WaitGroup
	for i, v := range variants {
		wg.Go(func() { envs[i] = tool.Invoke(ctx, v) })
	}
	wg.Wait()
	n := sc.Effects()
	if n > want {
		t.Errorf("%d calls at once left %d effects, want at most %d", len(variants), n, want)
	}
	for i, e := range envs {
		if err := e.Validate(); err != nil {
			t.Errorf("envelope %d invalid: %v", i, err)
		}
		if (e.Status == envelope.Success || e.Earlier != nil && e.Earlier.State == envelope.ActionSucceeded) && n == 0 {
			t.Errorf("envelope %d %s claims an effect the destination does not have", i, e)
		}
	}
}
