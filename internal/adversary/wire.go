package adversary

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// WireRun is one run of an example's -llm openai path against a [Model].
type WireRun struct {
	Plan  Plan
	Fault string
	// Want is the effects the destination must end with: 1, or 0 where
	// nothing can commit.
	Want int
	Seed uint64
	// RewordAtOnce: see [ModelOptions].
	RewordAtOnce bool
	// Concurrent replaces the example's loop with [ConcurrentLoop], which
	// runs each message's calls at once (and counts effects per message).
	Concurrent bool
	// PerMessage says that the example counts the destination's effects
	// once per assistant message, after all its calls, rather than after
	// each call (a loop that records a message's envelopes together).
	PerMessage bool
}

// RunWire runs ex's -llm openai path against an adversarial [Model] that
// asks for r.Plan's action, with r.Fault, in process, and fails t if the
// destination does not end with r.Want effects, if an envelope the model
// read contradicts the destination ([Ledger]), or if an unknown_outcome
// it read has no record awaiting reconciliation in the example's store.
// It returns the model, whose log says what was sent and read.
func RunWire(t *testing.T, ex demo.Example, r WireRun) *Model {
	t.Helper()
	m := NewModel(ModelOptions{Seed: r.Seed, RewordAtOnce: r.RewordAtOnce}, r.Plan)
	getenv := m.Start(t)
	ex.MaxIterations = m.mind.maxTurns + 4
	if r.Concurrent {
		ex.Loop, r.PerMessage = ConcurrentLoop, true
	}
	db := filepath.Join(t.TempDir(), "retrysafe.db")
	var out bytes.Buffer
	sum, err := demo.Run(context.Background(), ex, []string{"-llm", "openai", "-fault", r.Fault, "-db", db}, &out, getenv)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var bad []string
	for _, f := range m.Faults() {
		bad = append(bad, "the loop: "+f)
	}
	log := m.Log()
	turns, miss := alignWire(sum.Envelopes, log)
	bad = append(bad, miss...)
	l := NewLedger(r.Plan.Tool)
	l.Unordered = r.Concurrent
	for i, e := range sum.Envelopes {
		l.Read(e)
		if !r.PerMessage || i+1 == len(sum.Envelopes) || turns[i+1] != turns[i] {
			l.EndGroup(sum.EffectsAfter[i])
		}
	}
	bad = append(bad, l.Problems()...)
	if sum.Effects != r.Want {
		bad = append(bad, fmt.Sprintf("the destination ended with %d effects, want %d", sum.Effects, r.Want))
	}
	bad = append(bad, awaitingReconciliation(db, r.Plan.Tool, sum.Envelopes, l)...)
	if len(bad) > 0 {
		t.Errorf("seed %d, fault %s: %s\n\n%s\ntranscript:\n%s", r.Seed, r.Fault, strings.Join(bad, "\n"), Describe(log), out.String())
	} else {
		t.Logf("seed %d, fault %s: %s", r.Seed, r.Fault, Describe(log))
	}
	return m
}

// alignWire finds each envelope the example recorded among the results
// the model read, in order, and returns the message (turn) of each. An
// envelope the model never read, or one it read of the tool that the
// example did not record, is a problem.
func alignWire(envs []envelope.Envelope, log []Exchange) (turns []int, bad []string) {
	j := 0
	for i, e := range envs {
		s := e.String()
		for j < len(log) && log[j].Result != s {
			if x := log[j]; x.Envelope != nil && x.Envelope.Tool == e.Tool && x.Read {
				bad = append(bad, fmt.Sprintf("the model read %s (call %s), which the example did not record", x.Result, x.CallID))
			}
			j++
		}
		if j == len(log) {
			bad = append(bad, fmt.Sprintf("envelope %d %s never reached the model", i, s))
			turns = append(turns, -1)
			continue
		}
		turns = append(turns, log[j].Turn)
		j++
	}
	return turns, bad
}

// awaitingReconciliation checks in the store at path that every
// unknown_outcome read has a record: unknown still, or settled since as
// the envelopes last said.
func awaitingReconciliation(path, tool string, envs []envelope.Envelope, l *Ledger) []string {
	store, err := boltstore.Open(path, nil)
	if err != nil {
		return []string{fmt.Sprintf("opening the store after the run: %v", err)}
	}
	defer store.Close()
	claims := l.Claims()
	var bad []string
	seen := map[string]bool{}
	for _, e := range envs {
		if e.Tool != tool || e.Status != envelope.UnknownOutcome {
			continue
		}
		ref := e.RequestRef
		if e.Earlier != nil {
			ref = e.Earlier.RequestRef
		}
		if seen[ref] {
			continue
		}
		seen[ref] = true
		rec, err := store.Get(context.Background(), ref)
		switch {
		case errors.Is(err, storekit.ErrNotFound):
			bad = append(bad, fmt.Sprintf("%s was unknown_outcome, but the store has no record of it", ref))
			continue
		case err != nil:
			bad = append(bad, fmt.Sprintf("reading %s: %v", ref, err))
			continue
		}
		switch want := claims[ref]; {
		case rec.State == agenttool.Succeeded && want == notApplied.String(),
			rec.State == agenttool.Failed && want == applied.String(),
			rec.State == agenttool.Pending:
			bad = append(bad, fmt.Sprintf("%s was unknown_outcome; its record is %s now, and the envelopes last said %s", ref, rec.State, want))
		}
	}
	return bad
}

// Describe sums up a model's log: messages, calls by move, and the
// statuses and error codes it read.
func Describe(log []Exchange) string {
	turns := 0
	moves := map[string]int{}
	read := map[string]int{}
	for _, x := range log {
		turns = max(turns, x.Turn)
		moves[string(x.Move)]++
		switch {
		case x.Envelope == nil:
			read["not an envelope"]++
		case x.Envelope.Error != nil:
			read[string(x.Envelope.Status)+"/"+x.Envelope.Error.Code]++
		default:
			read[string(x.Envelope.Status)]++
		}
	}
	return fmt.Sprintf("%d messages, %d calls %s; read %s", turns, len(log), counts(moves), counts(read))
}

func counts(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
