package agenttool

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// A tool's definition is what decides its actions' keys and how they are
// guarded: its name, key version, key prefix, the fields that identify an
// action (and which of them are exact), plain text or JSON, class, fence,
// and how the destination is handed the reference (RefSentAs). Two
// replicas that build one tool differently — a rolling deploy that
// changes IdentifyingFields, say — give one request two references, and
// each would run it. Every record keeps the digest of the definition it
// was made under (Record.Definition); a call held back by an action of
// the tool made under another definition, still running, unknown or under
// its notice, says so, naming both, and the application's log says it
// too. Once that action is settled the new definition goes on: a
// deliberate redeploy is not refused. docs/stores.md says how to roll out
// such a change.
//
// An unknown action is resent or checked only by a definition that hands
// the destination the reference as the action did (RefSentAs): a keyed
// resend is safe because the destination meets the key where it met it
// before, and a check asks for the reference as the action sent it.
// The definition digests RefSentAs apart (storekit.SentAlike), and under
// a definition that sends the reference otherwise the claim does not take
// the action over (storekit.DecideClaim), the fence, the sweeper and an
// operator's reconcile do not ask about it, and the call answers that a
// person must settle it (reasonSentOtherwise). A change of the fence or
// of the class (at-most-once to keyed, say, for a destination found to
// dedupe by the key the tool already sent) sends alike: the action is
// resent and checked as the new definition says.

// defineTool sets the tool's definition and its description, from its
// configuration and, for a tool built with New, its input's JSON fields
// (all of which identify an action when IdentifyingFields is empty).
func (c *config) defineTool(name string, inputFields []string) {
	identify := slices.Clone(c.identifyOrder)
	switch {
	case c.TextInput:
		identify = []string{"(the text)"}
	case len(identify) == 0 && len(inputFields) > 0:
		identify = slices.Sorted(slices.Values(inputFields))
	case len(identify) == 0:
		identify = []string{"(every field)"}
	}
	var exact []string
	for f := range c.exact {
		exact = append(exact, f)
	}
	slices.Sort(exact)
	version := "2"
	if c.digestKey != nil {
		version = "3"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "identifying %s", strings.Join(identify, ", "))
	if len(exact) > 0 {
		fmt.Fprintf(&b, " (exact %s)", strings.Join(exact, ", "))
	}
	fmt.Fprintf(&b, "; class %v", c.Class)
	head := b.String()
	var tail strings.Builder
	fmt.Fprintf(&tail, "; fence %v", c.Fence)
	if c.KeyPrefix != name {
		fmt.Fprintf(&tail, "; key prefix %q", c.KeyPrefix)
	}
	fmt.Fprintf(&tail, "; key version %s", version)
	if c.RefSentAs != "" {
		fmt.Fprintf(&b, "; reference sent as %q", c.RefSentAs)
	}
	b.WriteString(tail.String())
	c.definitionText = b.String()
	// The one digest an earlier version kept of this definition (which
	// did not say how the reference is sent): its records are compared
	// with it (otherDefinition).
	legacy := sha256.Sum256([]byte("retrysafe/definition/v1\x00" + name + "\x00" + head + tail.String()))
	c.legacyDefinition = binary.BigEndian.Uint64(legacy[:8]) | 1
	// Two digests in one (storekit.Record.Definition): how the reference
	// is sent, in the high half; the whole, in the low half, its lowest
	// bit clear (set in the one digest of earlier versions) and the next
	// set (never 0, which records of older versions have).
	hi := sha256.Sum256([]byte("retrysafe/definition/sent/v1\x00" + name + "\x00" + c.RefSentAs))
	lo := sha256.Sum256([]byte("retrysafe/definition/v2\x00" + name + "\x00" + c.definitionText))
	c.definition = uint64(binary.BigEndian.Uint32(hi[:4]))<<32 | uint64(binary.BigEndian.Uint32(lo[:4])&^1|2)
}

// definitionName is how answers and logs name a definition.
func definitionName(d uint64) string { return fmt.Sprintf("%016x", d) }

// sentOtherwise reports whether rec's action was sent otherwise than c
// sends it (storekit.SentAlike): c may neither resend nor check it.
func (c *config) sentOtherwise(rec *Record) bool {
	return !storekit.SentAlike(rec.Definition, c.definition)
}

// otherDefinition reports whether rec was made under another definition
// of the tool than c's (false for records of versions that kept none). A
// record of a version that kept one digest of the whole (its lowest bit
// set) is compared with the digest that version made of c's definition:
// an upgrade that also changes what makes the key is still told apart.
func (c *config) otherDefinition(rec *Record) bool {
	switch {
	case rec.Definition == 0:
		return false
	case rec.Definition&1 == 1:
		return rec.Definition != c.legacyDefinition
	}
	return rec.Definition != c.definition
}
