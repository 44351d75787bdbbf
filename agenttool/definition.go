package agenttool

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// A tool's definition is what decides its actions' keys and how they are
// guarded: its name, key version, key prefix, the fields that identify an
// action (and which of them are exact), plain text or JSON, class and
// fence. Two replicas that build one tool differently — a rolling deploy
// that changes IdentifyingFields, say — give one request two references,
// and each would run it. Every record keeps the digest of the definition
// it was made under (Record.Definition); a call held back by an action of
// the tool made under another definition, still running, unknown or under
// its notice, says so, naming both, and the application's log says it
// too. Once that action is settled the new definition goes on: a
// deliberate redeploy is not refused. docs/stores.md says how to roll out
// such a change.

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
	fmt.Fprintf(&b, "; class %v; fence %v", c.Class, c.Fence)
	if c.KeyPrefix != name {
		fmt.Fprintf(&b, "; key prefix %q", c.KeyPrefix)
	}
	fmt.Fprintf(&b, "; key version %s", version)
	c.definitionText = b.String()
	sum := sha256.Sum256([]byte("retrysafe/definition/v1\x00" + name + "\x00" + c.definitionText))
	c.definition = binary.BigEndian.Uint64(sum[:8]) | 1 // never 0, which records of older versions have
}

// definitionName is how answers and logs name a definition.
func definitionName(d uint64) string { return fmt.Sprintf("%016x", d) }

// otherDefinition reports whether rec was made under another definition
// of the tool than c's (false for records of versions that kept none).
func (c *config) otherDefinition(rec *Record) bool {
	return rec.Definition != 0 && rec.Definition != c.definition
}
