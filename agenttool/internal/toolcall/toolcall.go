// Package toolcall runs the tool calls of one model turn through guarded
// tools, for the adapters of loops that hand an application the model's
// calls (openai-go, anthropic-sdk-go) or ask it for one tool by name
// (Eino, mcp-go). It imports the engine only.
package toolcall

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// CodeUnknownTool is the error code of a call of a tool that is not in the
// set: the model named a tool it was not offered. Nothing ran.
const CodeUnknownTool = "unknown_tool"

// Call is one tool call of a model turn.
type Call struct {
	ID   string // the loop's call id, for logs; never part of a key
	Name string
	Args string // the arguments as the model sent them
}

// Set is a set of guarded tools, by name. A Set is safe for concurrent use.
type Set struct {
	byName map[string]*agenttool.Tool
	names  []string // in the order given
}

// NewSet returns the set of tools; pkg names the adapter in errors.
func NewSet(pkg string, tools []*agenttool.Tool) (*Set, error) {
	s := &Set{byName: make(map[string]*agenttool.Tool, len(tools))}
	for i, t := range tools {
		if t == nil {
			return nil, fmt.Errorf("%s: tool %d is nil", pkg, i)
		}
		if _, dup := s.byName[t.Name()]; dup {
			return nil, fmt.Errorf("%s: two tools are named %q; a model could not tell them apart", pkg, t.Name())
		}
		s.byName[t.Name()] = t
		s.names = append(s.names, t.Name())
	}
	if len(tools) == 0 {
		return nil, errors.New(pkg + ": no tools given")
	}
	return s, nil
}

// Tools returns the tools in the order given.
func (s *Set) Tools() []*agenttool.Tool {
	out := make([]*agenttool.Tool, len(s.names))
	for i, n := range s.names {
		out[i] = s.byName[n]
	}
	return out
}

// Invoke runs one call: through its tool's Invoke, or, for a name not in
// the set, the unknown-tool envelope (nothing runs).
func (s *Set) Invoke(ctx context.Context, c Call) envelope.Envelope {
	t, ok := s.byName[c.Name]
	if !ok {
		return UnknownTool(c.Name, s.names)
	}
	return t.Invoke(ctx, c.Args)
}

// Run runs the calls of one turn and returns their envelopes in the calls'
// order. In order (concurrent false) each call starts after the one before
// it ended, so a call made after one that ended unknown meets the unknown
// fence; concurrently, every call starts at once (and agenttool still runs
// distinct writes of one tool in one session one at a time). withID, if not nil, puts
// a call's id on its context.
func (s *Set) Run(ctx context.Context, calls []Call, concurrent bool, withID func(context.Context, string) context.Context) []envelope.Envelope {
	out := make([]envelope.Envelope, len(calls))
	one := func(i int) {
		c := calls[i]
		cctx := ctx
		if withID != nil {
			cctx = withID(ctx, c.ID)
		}
		out[i] = s.Invoke(cctx, c)
	}
	if !concurrent || len(calls) < 2 {
		for i := range calls {
			one(i)
		}
		return out
	}
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() { one(i) })
	}
	wg.Wait()
	return out
}

// UnknownTool is the envelope that answers a call of a tool the model was
// not offered: a definite failure (nothing ran) that names the tools it
// may call. The name, which the model wrote, is cut to 64 characters.
func UnknownTool(name string, known []string) envelope.Envelope {
	shown := printable(name)
	if shown == "" {
		shown = "(no name)"
	}
	return envelope.Envelope{
		Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: shown,
		Error: &envelope.Error{Code: CodeUnknownTool,
			Message: fmt.Sprintf("there is no tool named %q; nothing was run. The tools are: %s", shown, strings.Join(slices.Sorted(slices.Values(known)), ", "))},
		Next: envelope.FixInput,
	}
}

// printable cuts s to 64 characters of valid UTF-8 without control
// characters.
func printable(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == 64 {
			b.WriteString("…")
			break
		}
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			r = '?'
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}
