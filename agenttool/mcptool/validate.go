package mcptool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/internal/canonjson"
)

// argumentSchema resolves t's input schema for checking a call's
// arguments (ToolOptions.ValidateArguments). The check must refuse only
// what the server refuses whatever validates it there, and cost a bounded
// amount whatever the schema, so the schema is read first:
//
//	$schema: a draft the validator reads, as servers spell it (with or
//	  without a trailing "#"), written as the validator spells it
//	refArg's own schema: dropped (its value is the guard's, and the check
//	  only guesses it)
//	$refs: followed, from the root, as deep as arguments nest: a walk
//	  longer than schemaBudget (a $ref back to where it was without
//	  reading deeper, or $refs that branch) makes the schema unreadable
//	keywords the validator may decide otherwise than the server's
//	  (a decimal multipleOf, a pattern of a dialect's own): dropped where
//	  they can only refuse; unreadable where they may allow as well
func argumentSchema(t *mcp.Tool, refArg string) (*jsonschema.Resolved, error) {
	root, err := readRoot(t)
	if err != nil {
		return nil, err
	}
	if props, ok := root["properties"].(map[string]any); ok && refArg != "" {
		if _, ok := props[refArg]; ok {
			props[refArg] = true
		}
	}
	return resolveRoot(root)
}

// readRoot decodes t's input schema (numbers as json.Number), its
// $schema a draft the validator reads, as the validator spells it.
func readRoot(t *mcp.Tool) (map[string]any, error) {
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchemaUnreadable, err)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var tree any
	if err := d.Decode(&tree); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchemaUnreadable, err)
	}
	root, ok := tree.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: it is not a JSON object", ErrSchemaUnreadable)
	}
	if v, ok := root["$schema"]; ok {
		s, _ := v.(string)
		spelled, ok := readableDrafts[strings.TrimSuffix(s, "#")]
		if !ok {
			return nil, fmt.Errorf("%w: it is %v; draft 2020-12 and draft-07 are read", ErrSchemaUnreadable, v)
		}
		root["$schema"] = spelled
	}
	return root, nil
}

// resolveRoot resolves a schema's root (its $schema readable), its
// uncertain keywords relaxed (see relax).
func resolveRoot(root map[string]any) (*jsonschema.Resolved, error) {
	if err := relax(root); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchemaUnreadable, err)
	}
	raw, err := json.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchemaUnreadable, err)
	}
	var schema jsonschema.Schema
	if err := json.Unmarshal(raw, &schema); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchemaUnreadable, err)
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchemaUnreadable, err)
	}
	return resolved, nil
}

// readableDrafts maps the drafts the validator reads, without a trailing
// "#", to the $schema it knows them by.
var readableDrafts = map[string]string{
	"https://json-schema.org/draft/2020-12/schema": "https://json-schema.org/draft/2020-12/schema",
	"http://json-schema.org/draft-07/schema":       "http://json-schema.org/draft-07/schema#",
	"https://json-schema.org/draft-07/schema":      "https://json-schema.org/draft-07/schema#",
}

// schemaBudget bounds the subschemas a check walks for one value of the
// arguments: the schema unfolded, its $refs followed, as deep as
// arguments nest. A tool's schema is some tens of them; a tree's,
// unfolded to the deepest nesting, some hundreds.
const schemaBudget = 10000

// polarity says what a subschema's verdict does to the whole one's:
// positive, a refusal there can only refuse; negative (under not), an
// acceptance there can only refuse; both (under if, oneOf, a contains
// with maxContains), either.
type polarity uint8

const (
	positive polarity = 1 << iota
	negative
	both = positive | negative
)

func (p polarity) flip() polarity {
	if p == both {
		return both
	}
	return p ^ both
}

// reading is one walk of a schema (see relax).
type reading struct {
	root  map[string]any
	left  int
	met   map[uintptr]polarity // the polarities each subschema was met in
	nodes []map[string]any     // the subschemas met, in the order met
}

// relax walks root's subschemas as a check would, and drops the keywords
// the validator may decide otherwise than a server's (see uncertain)
// where they can only refuse; where they may allow as well, or where the
// walk would not end within schemaBudget, it returns an error.
func relax(root map[string]any) error {
	r := &reading{root: root, left: schemaBudget, met: map[uintptr]polarity{}}
	if err := r.walk(root, canonjson.MaxDepth, positive); err != nil {
		return err
	}
	for _, m := range r.nodes {
		pol := r.met[reflect.ValueOf(m).Pointer()]
		if n, ok := m["multipleOf"].(json.Number); ok && !exactDivisor(n) {
			switch pol {
			case positive:
				delete(m, "multipleOf")
			case negative:
				// float64 errs toward "no multiple" (19.99 of 0.01):
				// under not, that only allows more.
			default:
				return fmt.Errorf("a decimal multipleOf (%s) where it may allow as well as refuse, which float64 cannot decide", n)
			}
		}
		if p, ok := m["pattern"].(string); ok {
			switch {
			case pol == positive && uncertain(p, false):
				delete(m, "pattern")
			case pol != positive && uncertain(p, true):
				return fmt.Errorf("a pattern (%q) where it may allow as well as refuse, which Go's regular expressions may read otherwise than the server's", p)
			}
		}
		if pp, ok := m["patternProperties"].(map[string]any); ok {
			for p := range pp {
				if uncertain(p, true) {
					return fmt.Errorf("a patternProperties pattern (%q), which Go's regular expressions may read otherwise than the server's", p)
				}
			}
		}
	}
	return nil
}

// walk meets v, a subschema a check evaluates on a value that may have
// depth levels nested under it, in polarity pol.
func (r *reading) walk(v any, depth int, pol polarity) error {
	if r.left--; r.left < 0 {
		return fmt.Errorf("its $refs lead a check through more than %d subschemas (a $ref back to where it was, or $refs that branch)", schemaBudget)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil // true or false; anything else, Resolve refuses
	}
	id := reflect.ValueOf(m).Pointer()
	if _, ok := r.met[id]; !ok {
		r.nodes = append(r.nodes, m)
	}
	r.met[id] |= pol
	if _, ok := m["$id"]; ok && id != reflect.ValueOf(r.root).Pointer() {
		return errors.New("a subschema has an $id of its own")
	}
	for _, k := range []string{"$dynamicRef", "$recursiveRef"} {
		if _, ok := m[k]; ok {
			return fmt.Errorf("it has a %s", k)
		}
	}
	if ref, ok := m["$ref"].(string); ok {
		target, err := r.target(ref)
		if err != nil {
			return err
		}
		if err := r.walk(target, depth, pol); err != nil {
			return err
		}
	}
	contains := pol
	if _, ok := m["maxContains"]; ok {
		contains = both
	}
	for _, k := range []struct {
		keyword string
		deeper  bool // the keyword applies to the value's members, items or names
		pol     polarity
	}{
		{"allOf", false, pol}, {"anyOf", false, pol}, {"oneOf", false, both}, {"not", false, pol.flip()},
		{"if", false, both}, {"then", false, pol}, {"else", false, pol}, {"dependentSchemas", false, pol}, {"dependencies", false, pol},
		{"properties", true, pol}, {"patternProperties", true, pol}, {"additionalProperties", true, pol}, {"propertyNames", true, pol},
		{"unevaluatedProperties", true, pol}, {"items", true, pol}, {"prefixItems", true, pol}, {"additionalItems", true, pol},
		{"unevaluatedItems", true, pol}, {"contains", true, contains},
	} {
		v, ok := m[k.keyword]
		if !ok {
			continue
		}
		d := depth
		if k.deeper {
			if depth == 0 {
				continue // no value nests deeper
			}
			d--
		}
		var subs []any
		switch v := v.(type) {
		case []any: // allOf, anyOf, oneOf, prefixItems, draft-07's items
			subs = v
		case map[string]any:
			switch k.keyword {
			case "properties", "patternProperties", "dependentSchemas", "dependencies":
				for _, name := range slices.Sorted(maps.Keys(v)) {
					if _, names := v[name].([]any); !names { // a dependencies entry that lists names
						subs = append(subs, v[name])
					}
				}
			default:
				subs = []any{v}
			}
		default:
			subs = []any{v}
		}
		for _, s := range subs {
			if err := r.walk(s, d, k.pol); err != nil {
				return err
			}
		}
	}
	return nil
}

// target finds what a $ref refers to: the schema's own document, by JSON
// pointer. Anything else (another document, an anchor) is not walked.
func (r *reading) target(ref string) (any, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, fmt.Errorf("a $ref (%q) to another document", ref)
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return nil, fmt.Errorf("a $ref (%q) that is not a JSON pointer", ref)
	}
	if frag == "" {
		return r.root, nil
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, fmt.Errorf("a $ref (%q) to an anchor", ref)
	}
	var v any = r.root
	for _, seg := range strings.Split(frag[1:], "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			if v, ok = x[seg]; !ok {
				return nil, fmt.Errorf("a $ref (%q) to nothing", ref)
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil, fmt.Errorf("a $ref (%q) to nothing", ref)
			}
			v = x[i]
		default:
			return nil, fmt.Errorf("a $ref (%q) to nothing", ref)
		}
	}
	return v, nil
}

// exactDivisor reports whether float64 decides multipleOf n as exact
// arithmetic does (but for values beyond 2^53): n is an integer, or a
// power of two.
func exactDivisor(n json.Number) bool {
	r, ok := new(big.Rat).SetString(n.String())
	if !ok {
		return false
	}
	if r.IsInt() {
		return true
	}
	f, exact := r.Float64()
	frac, _ := math.Frexp(math.Abs(f))
	return exact && frac == 0.5
}

// uncertain reports whether Go's regular expressions may read pattern p
// otherwise than the server's (ECMA-262, as JSON Schema says; Python's or
// Rust's, as servers do): an escaped letter or digit other than \t, \n,
// \r, \f, \v, \x, \p and \P (\w, \d and \s are ASCII in Go, Unicode in
// Python; \s is Unicode in ECMA-262; \b, \A, \z and \Q are Go's own), or
// a class "[]" or "[^]" (empty, or anything, in ECMA-262). With dot, an
// unescaped "." outside a class too: it matches "\r", U+2028 and U+2029
// in Go, not in ECMA-262 (Go's is the wider, which only allows more
// where a match allows).
func uncertain(p string, dot bool) bool {
	class := false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\' && i+1 < len(p):
			i++
			e := p[i]
			if (e >= 'a' && e <= 'z' || e >= 'A' && e <= 'Z' || e >= '0' && e <= '9') && !strings.ContainsRune("tnrfvxpP", rune(e)) {
				return true
			}
		case c == '[' && !class:
			class = true
			rest := strings.TrimPrefix(p[i+1:], "^")
			if strings.HasPrefix(rest, "]") {
				return true
			}
		case c == ']' && class:
			class = false
		case c == '.' && !class && dot:
			return true
		}
	}
	return false
}

// CheckInput implements agenttool.InputChecker: before anything is
// claimed, input that carries the RefArgument is refused, and, with
// ToolOptions.ValidateArguments, arguments the tool's input schema refuses
// (its RefArgument filled in with a reference of the usual shape).
func (r *remote) CheckInput(input string) error {
	if r.refArg == "" && r.schema == nil {
		return nil
	}
	d := json.NewDecoder(strings.NewReader(input))
	d.UseNumber()
	var args map[string]any
	if err := d.Decode(&args); err != nil || args == nil {
		return fmt.Errorf("the input is not a JSON object: %v", err)
	}
	if r.refArg != "" {
		if _, ok := args[r.refArg]; ok {
			return fmt.Errorf("the input carries %q, which the guard fills in with each action's request reference; send the call without it", r.refArg)
		}
		args[r.refArg] = r.name + "/" + strings.Repeat("a", 32)
	}
	if r.schema == nil {
		return nil
	}
	instance, faithful := floats(args)
	if !faithful {
		return nil // the server judges it
	}
	if err := r.schema.Validate(instance); err != nil {
		return fmt.Errorf("the arguments do not match the tool's input schema, so nothing was sent: %s; fix them and call again", clipped(err.Error()))
	}
	return nil
}

// floats turns the numbers of a decoded value into float64, in place, as
// the validator reads them, and reports whether float64 holds each
// faithfully: 15 significant digits at most, within its normal range, so
// that two numbers compare, and equal, as their float64s do. A number
// beyond (1e400, a 64-bit id, two of which float64 makes one) makes the
// check say nothing.
func floats(v any) (any, bool) {
	ok := true
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			var fine bool
			v[k], fine = floats(x)
			ok = ok && fine
		}
	case []any:
		for i, x := range v {
			var fine bool
			v[i], fine = floats(x)
			ok = ok && fine
		}
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		mantissa, _, _ := strings.Cut(strings.TrimPrefix(string(v), "-"), "e")
		digits := strings.Trim(strings.Replace(mantissa, ".", "", 1), "0")
		return f, err == nil && len(digits) <= 15 && (digits == "" || math.Abs(f) >= 0x1p-1022)
	}
	return v, ok
}

// maxRefusal bounds what a refusal quotes of the validator's error, which
// quotes a refused value whole, and every value of an enum.
const maxRefusal = 1000

// clipped returns s, or its beginning and its end (where the validator
// says why) when it is longer than maxRefusal.
func clipped(s string) string {
	if len(s) <= maxRefusal {
		return s
	}
	head, tail := maxRefusal*3/5, maxRefusal*2/5
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	from := len(s) - tail
	for from < len(s) && !utf8.RuneStart(s[from]) {
		from++
	}
	return s[:head] + " … " + s[from:]
}
