package agenttool

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/canonjson"
)

// input is the model's input after parsing, derived once, up front: the key
// and fingerprint are never computed again from something the tool could
// have changed.
type input struct {
	fingerprint Digest // of the exact canonical form the tool is run with
	identifying Digest // of the loose form of the identifying values
	canonical   []byte // the exact canonical form (the text, for TextInput)
	args
}

// args is what the tool is run with.
type args struct {
	forward string // what a wrapped tool receives: the canonical form that was digested
	value   any    // the decoded input of a typed tool
}

// typedInput is how a tool built with [New] reads its input.
type typedInput struct {
	shape  *shape
	decode func(canonical []byte) (any, error)
	encode func(v any) ([]byte, error)
}

// parse parses and checks model input and derives its fingerprint and the
// digest of its identifying values, once. The life of an input:
//
//	refuse an input larger than MaxInput
//	refuse a byte-order mark; trim white space
//	plain-text tools: the text is the input (and InputCheckers' check)
//	otherwise one JSON object, strict (no duplicate names, valid UTF-8)
//	screen every member at every depth: key-like names (refused, or
//	  stripped), names equal under case folding, request references
//	typed tools: check the shape (exact names, no null where the field
//	  cannot hold it, required fields present and not empty), decode, and
//	  continue with the canonical form of the decoded value (a wrapped
//	  InputChecker's check comes after, once the key is known: see
//	  Tool.refusedInput)
//	fingerprint: the exact canonical form; identifying: the loose form of
//	  the identifying values, none of them empty nor larger than
//	  MaxIdentifyingValue
//
// The loose form of each identifying value and of each member name is
// computed once: for some characters it costs a hundred times what ASCII
// does (U+FDFA normalises to 18 characters), so that the bounds, not the
// number of passes, decide what a call may cost.
func (t *Tool) parse(raw string) (input, *envelope.Error) {
	c := t.cfg
	if len(raw) > c.MaxInput {
		return input{}, invalid(fmt.Sprintf("the input is %d bytes, and this tool takes at most %d; send a shorter input", len(raw), c.MaxInput))
	}
	if strings.HasPrefix(strings.TrimLeft(raw, " \t\r\n"), "\ufeff") {
		return input{}, invalid("the input starts with a byte-order mark (U+FEFF); send the JSON text alone")
	}
	trimmed := strings.TrimSpace(raw)
	if c.TextInput {
		return c.parseText(trimmed)
	}
	if !strings.HasPrefix(trimmed, "{") {
		return input{}, invalid(fmt.Sprintf("send one JSON object with the tool's parameters%s, not %s", t.fieldList(), describeText(trimmed)))
	}
	canon, err := canonjson.CanonicalString(trimmed)
	if err != nil {
		return input{}, invalid(fmt.Sprintf("the input is not acceptable JSON (%v); send one JSON object", err))
	}
	// text is canon as a string: what a wrapped tool receives, and what the
	// tree's strings are cut from.
	text := string(canon)
	tree, err := decodeTree(canon, text)
	if err != nil {
		return input{}, invalid(fmt.Sprintf("the input is not acceptable JSON (%v); send one JSON object", err))
	}
	var keyLike []string
	names := looseNames{budget: c.MaxIdentifyingValue}
	if e := c.screen("", tree, &keyLike, &names); e != nil {
		return input{}, e
	}
	if len(keyLike) > 0 {
		if c.ModelKeys == RefuseModelKeys {
			return input{}, &envelope.Error{Code: envelope.CodeModelSuppliedKey,
				Message: fmt.Sprintf("remove the field %q: this tool derives its idempotency key itself, and a retry of the same action is safe without one",
					keyLike[0])}
		}
		c.strip(tree)
		if canon, err = canonicalOf(tree); err != nil {
			return input{}, invalid(err.Error())
		}
		text = string(canon)
	}
	var in input
	if ty := t.typed; ty != nil {
		if err := ty.shape.check("", tree, &names); err != nil {
			return input{}, invalid(err.Error())
		}
		v, err := ty.decode(canon)
		if err != nil {
			return input{}, invalid(fmt.Sprintf("the input does not fit the tool's parameters: %v", err))
		}
		// The key follows what the tool receives: the decoded value.
		out, err := ty.encode(v)
		if err == nil {
			canon, err = canonjson.Canonical(out)
		}
		if err == nil {
			tree, err = decodeTree(canon, string(canon))
		}
		// A struct field that encodes as null (a nil pointer, an embedded
		// pointer that null allocated) is the same as one left out.
		if err == nil && ty.shape.dropNulls(tree) {
			canon, err = canonicalOf(tree)
		}
		if err != nil {
			return input{}, invalid(fmt.Sprintf("the decoded input cannot be encoded again: %v", err))
		}
		in.value = v
	} else {
		in.forward = text
	}
	in.fingerprint, in.canonical = c.digest(fingerprintTag, canon), canon
	var e *envelope.Error
	if in.identifying, e = c.identifyingDigest(tree.(map[string]any), t.typed, &names); e != nil {
		return input{}, e
	}
	return in, nil
}

// parseText parses the input of a tool declared to take plain text.
func (c *config) parseText(text string) (input, *envelope.Error) {
	if isEmpty(text) {
		return input{}, invalid("the input is empty; say what the tool should do")
	}
	if len(text) > c.MaxIdentifyingValue {
		return input{}, invalid(fmt.Sprintf("the input is %d bytes, and this tool takes at most %d; send a shorter input", len(text), c.MaxIdentifyingValue))
	}
	if c.isRef(text) {
		return input{}, refSupplied("the input")
	}
	var in input
	in.forward, in.canonical = text, []byte(text)
	in.fingerprint = c.digest(fingerprintTag, appendPart([]byte("text"), text))
	in.identifying = digest(identifyingTag, appendLoose(nil, text, false, nil))
	return in, nil
}

// screen walks the whole input: it collects the paths of key-like members,
// and refuses two names of one object that differ only in case or spacing
// (a tool may read either), any value equal to a request reference of
// this tool (a key in disguise), and member names beyond ASCII of more
// than MaxIdentifyingValue bytes in all (each is folded to its skeleton and
// its loose form, which cost for some characters a hundred times what
// ASCII does).
func (c *config) screen(path string, v any, keyLike *[]string, names *looseNames) *envelope.Error {
	switch v := v.(type) {
	case map[string]any:
		var seen map[string]string
		if len(v) > 1 {
			seen = make(map[string]string, len(v))
		}
		var stack [16]string
		for _, name := range appendSortedNames(stack[:0], v) {
			if !names.charge(name) {
				return invalid(fmt.Sprintf("the input's member names with characters beyond ASCII come to more than %d bytes in all; use fewer or shorter names", c.MaxIdentifyingValue))
			}
			p := join(path, name)
			if c.keyLikeName(name, names) {
				*keyLike = append(*keyLike, p)
				continue
			}
			if seen != nil {
				l := names.of(name)
				if other, dup := seen[l]; dup {
					return invalid(fmt.Sprintf("the fields %q and %q differ only in case or spacing; send one of them", join(path, other), p))
				}
				seen[l] = name
			}
			if e := c.screen(p, v[name], keyLike, names); e != nil {
				return e
			}
		}
	case []any:
		for i, item := range v {
			if e := c.screen(fmt.Sprintf("%s[%d]", path, i), item, keyLike, names); e != nil {
				return e
			}
		}
	case string:
		if c.isRef(v) {
			return refSupplied(fmt.Sprintf("the field %q", path))
		}
	}
	return nil
}

// strip removes key-like members at every depth.
func (c *config) strip(v any) {
	switch v := v.(type) {
	case map[string]any:
		for name, val := range v {
			if c.isKeyLike(name) {
				delete(v, name)
				continue
			}
			c.strip(val)
		}
	case []any:
		for _, item := range v {
			c.strip(item)
		}
	}
}

// identifyingDigest digests the loose form of the identifying values of an
// input: the identifying fields, or every member. None may be empty, nor
// larger than MaxIdentifyingValue. names keeps the loose member names of
// the input (screen filled it).
func (c *config) identifyingDigest(obj map[string]any, typed *typedInput, names *looseNames) (Digest, *envelope.Error) {
	b := make([]byte, 0, 1024) // on the stack: most inputs' loose forms fit
	if c.identify == nil {
		members := sortedNames(obj)
		if !slices.ContainsFunc(members, func(n string) bool { return !isEmpty(obj[n]) }) &&
			(typed == nil || len(typed.shape.names) > 0) {
			return Digest{}, invalid("the input is empty; give the tool's parameters")
		}
		for _, name := range members {
			if e := c.bound(name, obj[name]); e != nil {
				return Digest{}, e
			}
		}
		sorted := make([][2]string, 0, len(obj)) // loose name, name
		for name := range obj {
			sorted = append(sorted, [2]string{names.of(name), name})
		}
		slices.SortFunc(sorted, func(x, y [2]string) int { return strings.Compare(x[0], y[0]) })
		b = binaryLen(append(b, 'o'), len(sorted))
		for _, n := range sorted {
			b = appendPart(b, n[0])
			b = appendLoose(b, obj[n[1]], c.exact[n[1]], names)
		}
		return digest(identifyingTag, b), nil
	}
	var missing []string
	var stack [8]any
	vals := stack[:0]
	if len(c.identifyOrder) > len(stack) {
		vals = make([]any, 0, len(c.identifyOrder))
	}
	vals = vals[:len(c.identifyOrder)]
	for i, f := range c.identifyOrder {
		val, ok := obj[f]
		if !ok && typed == nil {
			// A wrapped tool may read member names loosely: so does its key.
			lf := looseString(f)
			for name, v := range obj {
				if names.of(name) == lf {
					val, ok = v, true
				}
			}
		}
		if !ok || isEmpty(val) {
			missing = append(missing, f)
			continue
		}
		if e := c.bound(f, val); e != nil {
			return Digest{}, e
		}
		vals[i] = val
	}
	if len(missing) > 0 {
		return Digest{}, invalid(fmt.Sprintf("missing field %s, needed to identify the action; give its value", strings.Join(quoteAll(missing), ", ")))
	}
	b = binaryLen(append(b, 'f'), len(c.IdentifyingFields))
	for i, f := range c.identifyOrder {
		b = appendPart(b, looseString(f))
		b = appendLoose(b, vals[i], c.exact[f], names)
	}
	return digest(identifyingTag, b), nil
}

// bound refuses an identifying value larger than MaxIdentifyingValue,
// before its loose form is computed.
func (c *config) bound(field string, v any) *envelope.Error {
	if _, ok := sizeWithin(v, c.MaxIdentifyingValue); !ok {
		return invalid(fmt.Sprintf("the value of %q is longer than this tool takes (at most %d bytes, to tell one action from another); send a shorter one",
			field, c.MaxIdentifyingValue))
	}
	return nil
}

// sizeWithin measures v — the bytes of its strings, member names and
// numbers, at every depth — and reports whether it is at most limit, and
// the size counted. It stops counting once past the limit.
func sizeWithin(v any, limit int) (int, bool) {
	n := 0
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case string:
			n += len(v)
		case json.Number:
			n += len(v)
		case []any:
			for _, item := range v {
				if !walk(item) {
					return false
				}
			}
		case map[string]any:
			for name, item := range v {
				n += len(name)
				if n > limit || !walk(item) {
					return false
				}
			}
		}
		return n <= limit
	}
	ok := walk(v)
	return n, ok
}

// looseNames keeps the loose forms of one input's member names, so that
// each is computed once per call however many times the name is compared,
// and what is left of the bytes of names beyond ASCII the call may fold.
// A nil *looseNames computes every time.
type looseNames struct {
	m, skel map[string]string
	budget  int
}

// charge counts a member name met by the screen against the budget, and
// reports whether the budget holds: ASCII names cost one pass and are
// free.
func (l *looseNames) charge(name string) bool {
	if isASCII(name) {
		return true
	}
	l.budget -= len(name)
	return l.budget >= 0
}

// of returns the loose form of name.
func (l *looseNames) of(name string) string {
	if l == nil || isASCII(name) {
		return looseString(name) // ASCII costs one pass: not worth a map
	}
	if s, ok := l.m[name]; ok {
		return s
	}
	if l.m == nil {
		l.m = make(map[string]string)
	}
	s := looseString(name)
	l.m[name] = s
	return s
}

// skeletonOf returns the skeleton of name.
func (l *looseNames) skeletonOf(name string) string {
	if l == nil || isASCII(name) {
		return skeleton(name)
	}
	if s, ok := l.skel[name]; ok {
		return s
	}
	if l.skel == nil {
		l.skel = make(map[string]string)
	}
	s := skeleton(name)
	l.skel[name] = s
	return s
}

// isKeyLike reports whether a member name, folded to its skeleton, is one of
// the key-like fields, or contains one of the key-like stems.
func (c *config) isKeyLike(name string) bool {
	var stack [64]byte
	var s []byte
	if isASCII(name) && len(name) <= len(stack) {
		s = appendASCIISkeleton(stack[:0], name) // the common case, without allocating
	} else {
		s = []byte(skeleton(name))
	}
	if c.keyLike[string(s)] {
		return true
	}
	for _, stem := range c.keyStems {
		if bytes.Contains(s, []byte(stem)) {
			return true
		}
	}
	return false
}

// keyLikeName is isKeyLike, with the skeleton of a name beyond ASCII kept
// in names for the rest of the call.
func (c *config) keyLikeName(name string, names *looseNames) bool {
	if isASCII(name) {
		return c.isKeyLike(name)
	}
	return c.isKeyLikeSkeleton(names.skeletonOf(name))
}

// isKeyLikeSkeleton is isKeyLike of a name's skeleton.
func (c *config) isKeyLikeSkeleton(s string) bool {
	if c.keyLike[s] {
		return true
	}
	for _, stem := range c.keyStems {
		if strings.Contains(s, stem) {
			return true
		}
	}
	return false
}

// isRef reports whether s is, up to case and surrounding space, a request
// reference of this tool.
func (c *config) isRef(s string) bool {
	s = strings.TrimSpace(s)
	p := c.KeyPrefix
	if len(s) != len(p)+1+refLen || !strings.EqualFold(s[:len(p)], p) || s[len(p)] != '/' {
		return false
	}
	for i := len(p) + 1; i < len(s); i++ {
		ch := s[i] | 0x20 // lower case for letters
		if !(ch >= 'a' && ch <= 'z' || s[i] >= '2' && s[i] <= '7') {
			return false
		}
	}
	return true
}

func refSupplied(where string) *envelope.Error {
	return &envelope.Error{Code: envelope.CodeModelSuppliedKey,
		Message: fmt.Sprintf("%s holds a request reference of this tool; references come from the tool itself: remove it, and call again with the action's own parameters", where)}
}

func invalid(msg string) *envelope.Error {
	return &envelope.Error{Code: envelope.CodeInvalidInput, Message: msg}
}

// fieldList names a typed tool's fields for a message, or "".
func (t *Tool) fieldList() string {
	if t.typed == nil || len(t.typed.shape.names) == 0 {
		return ""
	}
	return " (" + t.typed.shape.list() + ")"
}

func describeText(s string) string {
	switch {
	case s == "":
		return "nothing"
	case s == "null":
		return "null"
	case strings.HasPrefix(s, "["):
		return "an array"
	case strings.HasPrefix(s, `"`):
		return "a string"
	}
	return "plain text"
}

// decodeTree decodes canonical JSON into maps, slices, strings, booleans,
// json.Number and nil; text is string(canon), of which the strings are
// substrings.
func decodeTree(canon []byte, text string) (any, error) { return canonjson.DecodeShared(canon, text) }

// appendSortedNames appends the member names of m to dst, sorted.
func appendSortedNames(dst []string, m map[string]any) []string {
	for n := range m {
		dst = append(dst, n)
	}
	slices.Sort(dst)
	return dst
}

// canonicalOf returns the canonical JSON of a decoded tree.
func canonicalOf(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return canonjson.Canonical(b)
}

func digest(tag string, b []byte) Digest {
	h := sha256.New()
	h.Write([]byte(tag))
	h.Write(b)
	var d Digest
	h.Sum(d[:0])
	return d
}

func quoteAll(names []string) []string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return q
}
