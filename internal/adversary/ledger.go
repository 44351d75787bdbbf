package adversary

import (
	"fmt"
	"maps"
	"slices"

	"github.com/retrysafe/retrysafe/envelope"
)

// claim is what the envelopes a model read say of one request reference.
type claim int

const (
	notApplied claim = iota + 1
	maybeApplied
	applied
)

func (c claim) String() string {
	return map[claim]string{notApplied: "not applied", maybeApplied: "maybe applied", applied: "applied"}[c]
}

// Ledger holds a run's envelopes to the destination. It keeps, for every
// request reference of one tool, what the envelopes read so far say of it
// (applied, maybe applied, not applied), and after each envelope checks
// that the destination's effects of the tool are at least the references
// said applied and at most those said applied or maybe applied: each
// action has at most one effect, and a reference said not applied has
// none. It also checks what [Check] checks of each envelope alone.
//
// Effects are counted after each group of envelopes ([Ledger.EndGroup]):
// one call each where the example counts after every call, or one
// message's calls where it counts after the message.
//
// A Ledger is not safe for concurrent use.
type Ledger struct {
	Tool string
	// Unordered says that the calls of a group ran at once, so that the
	// order of their envelopes says nothing: what they say of a reference
	// is taken together, the strongest claim first (applied, maybe, not
	// applied), when the group ends.
	Unordered bool

	group   map[string]claim // the current group's claims, when Unordered
	refs    map[string]claim
	results map[string]string // the result each applied reference was reported with
	bad     []string

	unknownSeen bool   // an unknown outcome was read: an effect may land later, on its own
	unknownThen bool   // one was read before the current group
	before      int    // the effects before the current group
	fresh       int    // fresh successes in the current group
	replays     int    // replayed successes in the current group
	mayApply    int    // calls of the current group that may have applied the effect
	first, n    int    // the current group's first envelope; envelopes read
	last        string // the last envelope read
}

// NewLedger returns an empty ledger for tool's envelopes.
func NewLedger(tool string) *Ledger {
	return &Ledger{Tool: tool, refs: map[string]claim{}, results: map[string]string{}, group: map[string]claim{}}
}

// Read takes the next envelope of the run. Envelopes of other tools (a
// tool that does not exist) must be refusals.
func (l *Ledger) Read(e envelope.Envelope) {
	l.n++
	l.last = e.String()
	say := func(format string, args ...any) {
		l.bad = append(l.bad, fmt.Sprintf("envelope %d %s: %s", l.n-1, e.String(), fmt.Sprintf(format, args...)))
	}
	if err := e.Validate(); err != nil {
		say("invalid: %v", err)
	}
	if e.Tool != l.Tool {
		if e.Status != envelope.DefiniteFailure {
			say("a call of a tool that does not exist did not fail")
		}
		return
	}
	set := func(ref string, c claim) {
		switch {
		case ref == "":
		case l.Unordered:
			l.group[ref] = max(l.group[ref], c)
		default:
			l.claim(ref, c, say)
		}
	}
	result := func(ref string, r []byte) { // one action has one result, however often it is told
		if ref == "" || len(r) == 0 {
			return
		}
		if was, ok := l.results[ref]; ok && was != string(r) {
			say("reports %s with the result %s, after %s", ref, r, was)
		}
		l.results[ref] = string(r)
	}
	if e.Earlier != nil && e.Earlier.State == envelope.ActionSucceeded {
		result(e.Earlier.RequestRef, e.Earlier.Result)
	}
	switch e.Status {
	case envelope.Success:
		set(e.RequestRef, applied)
		result(e.RequestRef, e.Result)
		if e.Replayed {
			l.replays++
		}
		if !e.Replayed && !e.Reconciled {
			l.fresh++
			l.mayApply++
		}
	case envelope.UnknownOutcome:
		l.unknownSeen = true
		if e.Earlier != nil { // the fence: this call did nothing
			set(e.Earlier.RequestRef, earlierClaim(e.Earlier.State))
		} else {
			set(e.RequestRef, maybeApplied)
			l.mayApply++
		}
	case envelope.DefiniteFailure:
		switch {
		case e.Error != nil && (e.Error.Code == envelope.CodeStoreUnavailable || e.Error.Code == envelope.CodeCancelled):
			// It never reached the action's record: it says nothing of it.
		case e.Earlier != nil:
			set(e.Earlier.RequestRef, earlierClaim(e.Earlier.State))
			if e.Error != nil && e.Error.Code == envelope.CodeReplaced {
				set(e.RequestRef, notApplied)
			}
		case e.Error != nil && e.Error.Code == envelope.CodeInProgress:
			set(e.RequestRef, maybeApplied)
		default:
			set(e.RequestRef, notApplied)
		}
	}
}

// claim records what an envelope says of ref.
func (l *Ledger) claim(ref string, c claim, say func(string, ...any)) {
	if l.refs[ref] == applied && c != applied {
		say("says %s is %s, after an envelope said it was applied", ref, c)
	}
	l.refs[ref] = c
}

// EndGroup closes a group of envelopes (one call's, or one message's)
// with after, the tool's effects at the destination counted after it,
// and checks them against the ledger.
func (l *Ledger) EndGroup(after int) {
	say := func(format string, args ...any) {
		which := fmt.Sprintf("envelope %d", l.n-1)
		if l.n-1 > l.first {
			which = fmt.Sprintf("envelopes %d-%d", l.first, l.n-1)
		}
		l.bad = append(l.bad, fmt.Sprintf("%s (the last %s): %s", which, l.last, fmt.Sprintf(format, args...)))
	}
	for _, ref := range slices.Sorted(maps.Keys(l.group)) {
		l.claim(ref, l.group[ref], say)
	}
	clear(l.group)
	defer func() {
		l.before, l.first, l.fresh, l.replays, l.mayApply, l.unknownThen = after, l.n, 0, 0, 0, l.unknownSeen
	}()
	var yes, maybe int
	for _, c := range l.refs {
		switch c {
		case applied:
			yes++
		case maybeApplied:
			maybe++
		}
	}
	if after < yes {
		say("the envelopes say %d actions were applied, but the destination has %d effects", yes, after)
	}
	if after > yes+maybe {
		say("the destination has %d effects, but the envelopes allow at most %d (%s)", after, yes+maybe, l.describe())
	}
	if !l.unknownThen { // nothing could commit on its own: each call is accountable
		added := after - l.before
		if added > l.mayApply {
			say("the effects went from %d to %d, where %d calls may have applied one", l.before, after, l.mayApply)
		}
		if l.fresh > added {
			say("%d fresh successes, but the effects went from %d to %d", l.fresh, l.before, after)
		}
		if l.replays > 0 && l.n-l.first == 1 && l.before == 0 {
			say("a replayed success, but the destination had no effect before this call")
		}
	}
}

// Problems returns every way the envelopes read so far contradicted the
// destination.
func (l *Ledger) Problems() []string { return slices.Clone(l.bad) }

// Claims returns what the envelopes last said of each reference.
func (l *Ledger) Claims() map[string]string {
	out := map[string]string{}
	for ref, c := range l.refs {
		out[ref] = c.String()
	}
	return out
}

func (l *Ledger) describe() string {
	var parts []string
	for _, ref := range slices.Sorted(maps.Keys(l.refs)) {
		parts = append(parts, fmt.Sprintf("%s %s", ref, l.refs[ref]))
	}
	return fmt.Sprint(parts)
}

func earlierClaim(s envelope.ActionState) claim {
	switch s {
	case envelope.ActionSucceeded:
		return applied
	case envelope.ActionFailed:
		return notApplied
	}
	return maybeApplied
}
