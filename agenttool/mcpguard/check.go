package mcpguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/reconcile"
)

// checker is a reconcilable tool's Reconciler: it calls the check tool of
// the same server with the action's reference, and reads the answer.
type checker struct {
	u       *upstream
	check   *Check
	refForm mcptool.RefForm // how the tool sends its reference: ${ref} is that
}

// Check asks the server about req.Ref.
func (c *checker) Check(ctx context.Context, req reconcile.Request) reconcile.Answer {
	var input any
	if c.check.readsInput() {
		if req.Input == nil {
			return reconcile.CantSayBecause(errors.New("the check reads the action's input, and the store keeps none for it"))
		}
		dec := json.NewDecoder(strings.NewReader(string(req.Input)))
		dec.UseNumber()
		if err := dec.Decode(&input); err != nil {
			return reconcile.CantSayBecause(fmt.Errorf("the action's kept input does not read: %w", err))
		}
	}
	args := make(map[string]any, len(c.check.Arguments))
	for k, v := range c.check.Arguments {
		filled, err := fill(v, c.refForm.Of(req.Ref), input)
		if err != nil {
			return reconcile.CantSayBecause(fmt.Errorf("the check's argument %s: %w", k, err))
		}
		args[k] = filled
	}
	s, err := c.u.Session(ctx)
	if err != nil {
		return reconcile.CantSayBecause(err)
	}
	if why := c.u.unfitCheck(c.check.Tool); why != "" {
		return reconcile.CantSayBecause(fmt.Errorf("the check tool %s no longer reads as the check was written for it (%s): its answer settles nothing until the guard restarts", c.check.Tool, why))
	}
	// A question the server asks while the check runs is not the user's
	// to answer (Guard.ask).
	c.u.checking.Add(1)
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: c.check.Tool, Arguments: args})
	c.u.checking.Add(-1)
	if errors.Is(err, mcp.ErrConnectionClosed) {
		c.u.Lost(s)
	}
	if err != nil {
		return reconcile.CantSayBecause(fmt.Errorf("the check %s failed: %w", c.check.Tool, err))
	}
	if why := c.u.unfitCheck(c.check.Tool); why != "" {
		// The server changed the tool while the check ran.
		return reconcile.CantSayBecause(fmt.Errorf("the check tool %s no longer reads as the check was written for it (%s): its answer settles nothing until the guard restarts", c.check.Tool, why))
	}
	if res.NeedsInput() {
		// A question is no answer, whatever else the result carries: the
		// guard answers none of a check's (multi-round-trip, SEP-2322).
		return reconcile.CantSayBecause(fmt.Errorf("the check %s asks for input before it answers, which the guard does not give it", c.check.Tool))
	}
	if res.IsError {
		return reconcile.CantSayBecause(fmt.Errorf("the check %s answered an error: %s", c.check.Tool, text(res)))
	}
	answer, raw, err := decoded(res)
	if err != nil {
		return reconcile.CantSayBecause(fmt.Errorf("the check %s answered what the guard cannot read: %w", c.check.Tool, err))
	}
	switch {
	case c.check.Applied.matches(answer) && !c.check.byInputAlone():
		return reconcile.AppliedWith(raw)
	case c.check.Applied.matches(answer):
		return reconcile.CantSayBecause(errors.New("the check found the action by its input alone, and another action may have asked " +
			"the same (set input_identifies where the input names one effect at the server)"))
	case c.check.NotApplied.matches(answer):
		return reconcile.NotAppliedYet()
	}
	return reconcile.StillPending()
}

// decoded returns a check's answer as JSON values (numbers as
// json.Number), from its structured content or else its text.
func decoded(res *mcp.CallToolResult) (any, []byte, error) {
	var raw []byte
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, nil, err
		}
		raw = b
	} else {
		raw = []byte(text(res))
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, nil, fmt.Errorf("its answer is not JSON: %w", err)
	}
	// One value and nothing else: what follows it (a second value, a
	// second text part, a note) may say the opposite.
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("its answer is not one JSON value: more follows the first")
	}
	return v, raw, nil
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// matches reports whether the answer v matches m; a nil m matches nothing.
func (m *Match) matches(v any) bool {
	if m == nil {
		return false
	}
	got, ok, within := pointer(v, m.Pointer)
	switch {
	case m.Absent:
		return !ok && within
	case !ok:
		return false
	case m.Equals == nil && !m.HasEquals:
		return true
	case m.Equals == nil:
		return got == nil // "equals": null matches null alone
	}
	return sameValue(got, m.Equals)
}

// pointer resolves a JSON pointer (RFC 6901) in v: the value it leads
// to, if any. When it leads nowhere, within reports whether that is
// because the last step alone is missing from an object or an array that
// is there — proof of absence — rather than because the walk could not
// get that far (a member missing before it, a string or a null on the
// way: an answer of another shape, which proves nothing).
func pointer(v any, p string) (got any, ok, within bool) {
	if p == "" {
		return v, true, false
	}
	toks := strings.Split(p[1:], "/")
	for i, tok := range toks {
		last := i == len(toks)-1
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			var found bool
			if v, found = x[tok]; !found {
				return nil, false, last
			}
		case []any:
			// An index is digits, with no leading zero (RFC 6901).
			if tok == "" || (len(tok) > 1 && tok[0] == '0') || strings.TrimLeft(tok, "0123456789") != "" {
				return nil, false, false
			}
			n, err := strconv.Atoi(tok)
			if err != nil || n >= len(x) {
				return nil, false, last && err == nil
			}
			v = x[n]
		default:
			return nil, false, false
		}
	}
	return v, true, false
}

// sameValue compares two JSON values, numbers by value.
func sameValue(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x.Cmp(y) == 0
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}

func number(v any) (*big.Float, bool) {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case float64:
		s = strconv.FormatFloat(x, 'g', -1, 64)
	case int:
		s = strconv.Itoa(x)
	default:
		return nil, false
	}
	f, _, err := big.ParseFloat(s, 10, 256, big.ToNearestEven)
	return f, err == nil
}

// fill returns v, a check argument's value, with its placeholders
// replaced, at any depth.
func fill(v any, ref string, input any) (any, error) {
	switch x := v.(type) {
	case string:
		switch p, _ := placeholder(x); {
		case p == "ref":
			return ref, nil
		case strings.HasPrefix(p, "input"):
			found, ok, _ := pointer(input, strings.TrimPrefix(p, "input"))
			if !ok {
				return nil, fmt.Errorf("it reads %s, which the action's input does not have", x)
			}
			return found, nil
		}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			f, err := fill(e, ref, input)
			if err != nil {
				return nil, err
			}
			out[i] = f
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			f, err := fill(e, ref, input)
			if err != nil {
				return nil, err
			}
			out[k] = f
		}
		return out, nil
	}
	return v, nil
}

// byInputAlone reports whether the check finds the action by its input
// and not by its reference, where the configuration does not say that the
// input identifies one effect (Check.InputIdentifies): its "applied" may
// be another action's.
func (c *Check) byInputAlone() bool {
	if c.InputIdentifies || !c.readsInput() {
		return false
	}
	ref := false
	for _, v := range c.Arguments {
		strings_(v, func(s string) {
			if p, _ := placeholder(s); p == "ref" {
				ref = true
			}
		})
	}
	return !ref
}
