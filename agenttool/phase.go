package agenttool

import "fmt"

// The life of a call is a small set of named phases, driven by one loop
// (call.go). Each phase ends with an outcome, and next chooses the phase
// that follows from the phase, its outcome and what the call knows (its
// facts). next is a pure function: phase_test.go covers every phase and
// outcome, and checks that docs/life-of-a-call.md draws the same moves.

// phase is where a call is in its life.
type phase uint8

const (
	phaseClaim        phase = iota + 1 // claim the key in the store
	phaseWait                          // another call holds the key, or the scope's slot: wait, bounded
	phaseApprove                       // the action's outcome is unknown (at-most-once): ask the approver
	phaseFence                         // another action of the scope has an unknown outcome: settle it first
	phaseCheckOwn                      // the key was taken over from an unknown outcome: ask the destination first
	phaseAttempt                       // run the tool once
	phaseBackOff                       // wait before the next attempt
	phaseCheckAttempt                  // an attempt's outcome is unknown: ask the destination
	phaseRecord                        // record the outcome
	phaseGiveBack                      // give the key back: nothing was applied
	phaseDone                          // answer
	phaseCount                         // the number of phases, plus one
)

var phaseNames = [phaseCount]string{"", "claim", "wait", "approve", "fence", "check own", "attempt", "back off",
	"check attempt", "record", "give back", "done"}

func (p phase) String() string {
	if p > 0 && p < phaseCount {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// outcome is how a phase ended.
type outcome uint8

const (
	// claim
	claimGranted  outcome = iota + 1 // the key is the call's: new, or approved for one more attempt
	claimTookOver                    // the key is the call's, taken over from an unknown outcome or a dead holder
	claimRefused                     // another principal's, tool's or input's key: refused
	claimSettled                     // the action is settled (succeeded or failed): replay it
	claimUnknown                     // the action's outcome is unknown, and not the call's to take over
	claimRunning                     // another call holds the key
	slotRunning                      // another action of the scope holds its slot and runs (or is checked)
	slotUnknown                      // another action of the scope is unknown, or its holder's lease lapsed
	slotApproved                     // another action of the scope is approved for one more attempt: take it
	slotNotice                       // another action of the scope was just found done, or the one the call's action or the slot's holder stands in for
	claimedBeside                    // granted, beside an unknown action of the scope that holds another slot, or none: give it back
	storeFailed                      // the store could not answer
	// wait
	waited   // the holder ended, or it is time to look again
	waitOver // WaitTimeout passed, or the caller's context ended
	// approve
	approvedRetry    // the approver allowed one more attempt
	approverAnswered // undecided, stale, refused or compensated
	// fence
	earlierApplied    // found done: settled with its notice, the call kept held back
	earlierNotApplied // found not applied: the call goes on in its place
	earlierUnknown    // still unknown, or nobody can ask
	earlierMoved      // it changed since the claim saw it
	// check own, check attempt
	checkApplied
	checkNotApplied
	checkNoAnswer // pending, can't say, no answer in time
	// attempt
	attemptSucceeded
	attemptRefused   // a definite error
	attemptTransient // certainly not applied
	attemptMaybe     // the outcome is unknown
	attemptAsks      // the destination asks for input before it acts: nothing applied
	leaseLost        // the lease could not be kept: nothing more runs
	keyForgotten     // keyed: the destination may have forgotten the key
	// back off
	backedOff
	noMoreAttempts
	// record, give back
	recorded
	givenBack
	effectFound // the store refused to forget the key: an effect committed under it
	holdLost    // another call took the key over while this one held it
	outcomeCount
)

var outcomeNames = [outcomeCount]string{"", "granted", "took over", "refused", "settled", "unknown", "running",
	"slot running", "slot unknown", "slot approved", "slot notice", "claimed beside", "store failed", "waited", "wait over",
	"approved retry", "approver answered", "earlier applied", "earlier not applied", "earlier unknown", "earlier moved",
	"applied", "not applied", "no answer", "succeeded", "refused definitely", "transient", "maybe applied", "asks for input",
	"lease lost", "key forgotten", "backed off", "no more attempts", "recorded", "given back", "effect found", "hold lost"}

func (o outcome) String() string {
	if o > 0 && o < outcomeCount {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// effect is what may have happened to the call's action.
type effect uint8

const (
	effectNone      effect = iota // no attempt of the action may have applied it
	effectMaybe                   // an attempt may have applied it, and no check said otherwise
	effectNotFound                // it was unknown, and a check found it not applied (an attempt may still have acted)
	effectCommitted               // the store says an effect committed under the key: it happened
)

// mayApply reports whether the action may have been applied as far as the
// call knows now: its outcome is not to be given away.
func (e effect) mayApply() bool { return e == effectMaybe || e == effectCommitted }

// facts is what the choice of the next phase depends on, besides the
// phase and its outcome.
type facts struct {
	class       Class
	reconciler  bool   // the tool has a Reconciler
	approver    bool   // the tool has an Approver
	effect      effect // what may have happened
	retriesLeft bool   // the retry policy allows another attempt
	forgotten   bool   // keyed: the destination may have forgotten the key
}

// next returns the phase that follows ph when it ends with o. A move that
// must never happen is an error naming it.
func next(ph phase, o outcome, f facts) (phase, error) {
	checks := f.reconciler && f.class != AtMostOnce
	if f.class == ReadOnly && ph != phaseAttempt && ph != phaseBackOff {
		return 0, fmt.Errorf("agenttool: no move from %v on %v: a read-only tool only attempts and backs off", ph, o)
	}
	switch ph {
	case phaseClaim:
		switch o {
		case claimGranted:
			return phaseAttempt, nil
		case claimTookOver:
			switch {
			case f.class == Keyed && f.forgotten && f.reconciler:
				return phaseCheckOwn, nil
			case f.class == Keyed && f.forgotten:
				return phaseGiveBack, nil
			case f.class == Keyed:
				return phaseAttempt, nil
			case f.class == Reconcilable && f.reconciler:
				return phaseCheckOwn, nil
			}
		case claimUnknown:
			if f.class == AtMostOnce && f.approver {
				return phaseApprove, nil
			}
			return phaseDone, nil
		case claimRefused, claimSettled, slotNotice, storeFailed:
			return phaseDone, nil
		case claimedBeside:
			return phaseGiveBack, nil
		case claimRunning, slotRunning:
			return phaseWait, nil
		case slotUnknown:
			return phaseFence, nil
		case slotApproved:
			return phaseClaim, nil
		}
	case phaseWait:
		switch o {
		case waited:
			return phaseClaim, nil
		case waitOver:
			return phaseDone, nil
		}
	case phaseApprove:
		switch o {
		case approvedRetry:
			return phaseClaim, nil
		case approverAnswered, storeFailed:
			return phaseDone, nil
		}
	case phaseFence:
		switch o {
		case earlierNotApplied, earlierMoved:
			return phaseClaim, nil
		case earlierApplied, earlierUnknown, storeFailed:
			return phaseDone, nil
		}
	case phaseCheckOwn:
		switch o {
		case checkApplied, checkNoAnswer:
			return phaseRecord, nil
		case checkNotApplied:
			return phaseAttempt, nil
		}
	case phaseAttempt:
		if f.class == ReadOnly {
			switch o {
			case attemptSucceeded, attemptRefused, attemptAsks:
				return phaseDone, nil
			case attemptTransient, attemptMaybe:
				if f.retriesLeft {
					return phaseBackOff, nil
				}
				return phaseDone, nil
			}
			break
		}
		switch o {
		case attemptSucceeded, attemptRefused:
			return phaseRecord, nil
		case attemptTransient:
			switch {
			case f.retriesLeft:
				return phaseBackOff, nil
			case f.effect.mayApply():
				return phaseRecord, nil
			}
			return phaseGiveBack, nil
		case attemptAsks:
			// Nothing was applied, and nothing is retried: the action goes
			// on when the caller answers, in a call that meets the same key.
			if f.effect.mayApply() {
				return phaseRecord, nil
			}
			return phaseGiveBack, nil
		case attemptMaybe:
			switch {
			case f.class == Keyed && f.retriesLeft:
				return phaseBackOff, nil
			case f.class == Reconcilable && f.reconciler:
				return phaseCheckAttempt, nil
			}
			return phaseRecord, nil
		case leaseLost:
			if f.effect.mayApply() {
				return phaseRecord, nil
			}
			return phaseGiveBack, nil
		case keyForgotten:
			if f.class != Keyed {
				break
			}
			if f.reconciler {
				return phaseCheckOwn, nil
			}
			return phaseRecord, nil
		}
	case phaseBackOff:
		switch o {
		case backedOff:
			return phaseAttempt, nil
		case noMoreAttempts:
			switch {
			case f.class == ReadOnly:
				return phaseDone, nil
			case f.effect.mayApply():
				return phaseRecord, nil
			}
			return phaseGiveBack, nil
		}
	case phaseCheckAttempt:
		switch o {
		case checkApplied, checkNoAnswer:
			return phaseRecord, nil
		case checkNotApplied:
			switch {
			case f.effect == effectCommitted:
				return phaseRecord, nil // the store knows better: it stays unknown
			case f.retriesLeft:
				return phaseBackOff, nil
			}
			return phaseGiveBack, nil
		}
	case phaseRecord, phaseGiveBack:
		switch {
		case o == recorded && ph == phaseRecord, o == givenBack && ph == phaseGiveBack:
			return phaseDone, nil
		case o == effectFound:
			// The tool reported a failure, but an effect committed: the
			// action happened. Ask the destination, or record it unknown.
			if checks {
				return phaseCheckAttempt, nil
			}
			return phaseRecord, nil
		case o == holdLost:
			// What this call saw is not the action's outcome: claim again
			// and answer with what the action became.
			return phaseClaim, nil
		}
	}
	return 0, fmt.Errorf("agenttool: no move from %v on %v (class %v, effect %d)", ph, o, f.class, f.effect)
}
