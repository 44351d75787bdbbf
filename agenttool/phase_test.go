package agenttool

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// move is one row of the life of a call: from a phase, on an outcome, when
// the facts allow, to the next phase.
type move struct {
	from phase
	on   outcome
	when func(f facts) bool
	to   phase
}

func always(facts) bool { return true }

func classIs(cs ...Class) func(facts) bool {
	return func(f facts) bool { return slices.Contains(cs, f.class) }
}

// lifeOfACall is the table of every move a call may make, first match
// wins; a phase and outcome no row names must never happen. It is written
// apart from next, which must agree with it on every combination of facts.
var lifeOfACall = []move{
	{phaseClaim, claimGranted, always, phaseAttempt},
	{phaseClaim, claimTookOver, func(f facts) bool { return f.class == Keyed && f.forgotten && f.reconciler }, phaseCheckOwn},
	{phaseClaim, claimTookOver, func(f facts) bool { return f.class == Keyed && f.forgotten }, phaseGiveBack},
	{phaseClaim, claimTookOver, classIs(Keyed), phaseAttempt},
	{phaseClaim, claimTookOver, func(f facts) bool { return f.class == Reconcilable && f.reconciler }, phaseCheckOwn},
	{phaseClaim, claimRefused, always, phaseDone},
	{phaseClaim, claimSettled, always, phaseDone},
	{phaseClaim, claimUnknown, func(f facts) bool { return f.class == AtMostOnce && f.approver }, phaseApprove},
	{phaseClaim, claimUnknown, always, phaseDone},
	{phaseClaim, claimRunning, always, phaseWait},
	{phaseClaim, slotRunning, always, phaseWait},
	{phaseClaim, slotUnknown, always, phaseFence},
	{phaseClaim, slotApproved, always, phaseClaim},
	{phaseClaim, slotNotice, always, phaseDone},
	{phaseClaim, claimedBeside, always, phaseGiveBack},
	{phaseClaim, storeFailed, always, phaseDone},

	{phaseWait, waited, always, phaseClaim},
	{phaseWait, waitOver, always, phaseDone},

	{phaseApprove, approvedRetry, always, phaseClaim},
	{phaseApprove, approverAnswered, always, phaseDone},
	{phaseApprove, storeFailed, always, phaseDone},

	{phaseFence, earlierNotApplied, always, phaseClaim},
	{phaseFence, earlierMoved, always, phaseClaim},
	{phaseFence, earlierApplied, always, phaseDone},
	{phaseFence, earlierUnknown, always, phaseDone},
	{phaseFence, storeFailed, always, phaseDone},

	{phaseCheckOwn, checkApplied, always, phaseRecord},
	{phaseCheckOwn, checkNoAnswer, always, phaseRecord},
	{phaseCheckOwn, checkNotApplied, always, phaseAttempt},

	// Read-only tools store nothing: they answer as soon as they are done.
	{phaseAttempt, attemptSucceeded, classIs(ReadOnly), phaseDone},
	{phaseAttempt, attemptRefused, classIs(ReadOnly), phaseDone},
	{phaseAttempt, attemptAsks, classIs(ReadOnly), phaseDone},
	{phaseAttempt, attemptTransient, func(f facts) bool { return f.class == ReadOnly && f.retriesLeft }, phaseBackOff},
	{phaseAttempt, attemptMaybe, func(f facts) bool { return f.class == ReadOnly && f.retriesLeft }, phaseBackOff},
	{phaseAttempt, attemptTransient, classIs(ReadOnly), phaseDone},
	{phaseAttempt, attemptMaybe, classIs(ReadOnly), phaseDone},
	{phaseAttempt, leaseLost, classIs(ReadOnly), 0},
	{phaseAttempt, keyForgotten, classIs(ReadOnly), 0},

	{phaseAttempt, attemptSucceeded, always, phaseRecord},
	{phaseAttempt, attemptRefused, always, phaseRecord},
	{phaseAttempt, attemptTransient, func(f facts) bool { return f.retriesLeft }, phaseBackOff},
	{phaseAttempt, attemptTransient, func(f facts) bool { return f.effect.mayApply() }, phaseRecord},
	{phaseAttempt, attemptTransient, always, phaseGiveBack},
	{phaseAttempt, attemptAsks, func(f facts) bool { return f.effect.mayApply() }, phaseRecord},
	{phaseAttempt, attemptAsks, always, phaseGiveBack},
	{phaseAttempt, attemptMaybe, func(f facts) bool { return f.class == Keyed && f.retriesLeft }, phaseBackOff},
	{phaseAttempt, attemptMaybe, func(f facts) bool { return f.class == Reconcilable && f.reconciler }, phaseCheckAttempt},
	{phaseAttempt, attemptMaybe, always, phaseRecord},
	{phaseAttempt, leaseLost, func(f facts) bool { return f.effect.mayApply() }, phaseRecord},
	{phaseAttempt, leaseLost, always, phaseGiveBack},
	{phaseAttempt, keyForgotten, func(f facts) bool { return f.class == Keyed && f.reconciler }, phaseCheckOwn},
	{phaseAttempt, keyForgotten, classIs(Keyed), phaseRecord},

	{phaseBackOff, backedOff, always, phaseAttempt},
	{phaseBackOff, noMoreAttempts, classIs(ReadOnly), phaseDone},
	{phaseBackOff, noMoreAttempts, func(f facts) bool { return f.effect.mayApply() }, phaseRecord},
	{phaseBackOff, noMoreAttempts, always, phaseGiveBack},

	{phaseCheckAttempt, checkApplied, always, phaseRecord},
	{phaseCheckAttempt, checkNoAnswer, always, phaseRecord},
	{phaseCheckAttempt, checkNotApplied, func(f facts) bool { return f.effect == effectCommitted }, phaseRecord},
	{phaseCheckAttempt, checkNotApplied, func(f facts) bool { return f.retriesLeft }, phaseBackOff},
	{phaseCheckAttempt, checkNotApplied, always, phaseGiveBack},

	{phaseRecord, recorded, always, phaseDone},
	{phaseRecord, holdLost, always, phaseClaim},
	{phaseGiveBack, holdLost, always, phaseClaim},
	{phaseRecord, effectFound, func(f facts) bool { return f.reconciler && f.class != AtMostOnce }, phaseCheckAttempt},
	{phaseRecord, effectFound, always, phaseRecord},
	{phaseGiveBack, givenBack, always, phaseDone},
	{phaseGiveBack, effectFound, func(f facts) bool { return f.reconciler && f.class != AtMostOnce }, phaseCheckAttempt},
	{phaseGiveBack, effectFound, always, phaseRecord},
}

// allFacts is every combination of what next decides on.
func allFacts() []facts {
	var out []facts
	for _, class := range []Class{ReadOnly, Keyed, Reconcilable, AtMostOnce} {
		for _, eff := range []effect{effectNone, effectMaybe, effectNotFound, effectCommitted} {
			for bits := range 16 {
				out = append(out, facts{class: class, effect: eff,
					reconciler: bits&1 != 0, approver: bits&2 != 0, retriesLeft: bits&4 != 0, forgotten: bits&8 != 0})
			}
		}
	}
	return out
}

// expected is what the table says for from, on and f: the phase, or 0 for
// a move that must never happen.
func expected(from phase, on outcome, f facts) phase {
	if f.class == ReadOnly && from != phaseAttempt && from != phaseBackOff {
		return 0 // a read-only tool stores nothing: it attempts, backs off, and answers
	}
	for _, m := range lifeOfACall {
		if m.from == from && m.on == on && m.when(f) {
			return m.to
		}
	}
	return 0
}

// Every phase × outcome × facts: next takes the table's move, and refuses
// every move the table does not have, naming it.
func TestPhase_NextFollowsTheTable(t *testing.T) {
	checked, illegal := 0, 0
	for from := phaseClaim; from < phaseCount; from++ {
		for on := claimGranted; on < outcomeCount; on++ {
			for _, f := range allFacts() {
				want := expected(from, on, f)
				got, err := next(from, on, f)
				checked++
				switch {
				case want == 0 && err == nil:
					t.Errorf("%v on %v (%+v): moved to %v; want the move refused", from, on, f, got)
				case want == 0:
					illegal++
					if !strings.Contains(err.Error(), from.String()) || !strings.Contains(err.Error(), on.String()) {
						t.Errorf("the refusal of %v on %v does not name the move: %v", from, on, err)
					}
				case err != nil:
					t.Errorf("%v on %v (%+v): %v; want %v", from, on, f, err, want)
				case got != want:
					t.Errorf("%v on %v (%+v): moved to %v; want %v", from, on, f, got, want)
				}
			}
		}
	}
	t.Logf("%d combinations, %d of them refused", checked, illegal)
}

// Every phase but done has a way out, and is reached; every outcome ends
// some phase.
func TestPhase_EveryPhaseAndOutcomeIsUsed(t *testing.T) {
	left, reached := map[phase]bool{}, map[phase]bool{phaseClaim: true, phaseAttempt: true}
	used := map[outcome]bool{}
	for _, m := range lifeOfACall {
		if m.to == 0 {
			continue
		}
		left[m.from], reached[m.to], used[m.on] = true, true, true
	}
	for p := phaseClaim; p < phaseCount; p++ {
		if !reached[p] {
			t.Errorf("phase %v is never reached", p)
		}
		if !left[p] && p != phaseDone {
			t.Errorf("phase %v has no way out", p)
		}
	}
	for o := claimGranted; o < outcomeCount; o++ {
		if !used[o] {
			t.Errorf("outcome %v ends no phase", o)
		}
	}
}

// The drawing in docs/life-of-a-call.md lists exactly the moves of the
// table: a change of one is a change of the other.
func TestPhase_DrawingAgreesWithTheTable(t *testing.T) {
	b, err := os.ReadFile("../docs/life-of-a-call.md")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^\s*([a-z ]+?) --([a-z ]+?)(?: \[[^\]]*\])?--> ([a-z ]+)$`)
	drawn := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			drawn[fmt.Sprintf("%s --%s--> %s", m[1], m[2], m[3])] = true
		}
	}
	table := map[string]bool{}
	for from := phaseClaim; from < phaseCount; from++ {
		for on := claimGranted; on < outcomeCount; on++ {
			for _, f := range allFacts() {
				if to, err := next(from, on, f); err == nil {
					table[fmt.Sprintf("%v --%v--> %v", from, on, to)] = true
				}
			}
		}
	}
	for mv := range table {
		if !drawn[mv] {
			t.Errorf("the drawing lacks the move %q", mv)
		}
	}
	for mv := range drawn {
		if !table[mv] {
			t.Errorf("the drawing has a move the table does not: %q", mv)
		}
	}
}

// A move the table does not have panics in the call's transition, naming
// the move and the path taken.
func TestPhase_IllegalMovePanics(t *testing.T) {
	c := &call{t: &Tool{cfg: &config{Options: Options{Class: Keyed}}}, phase: phaseRecord}
	defer func() {
		p := recover()
		msg, _ := p.(string)
		if !strings.Contains(msg, "record") || !strings.Contains(msg, "granted") || !strings.Contains(msg, "path") {
			t.Errorf("panic %v; want one naming the move and the path", p)
		}
	}()
	c.moveTo(claimGranted)
}
