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
//	refuse a byte-order mark; trim white space
//	plain-text tools: the text is the input
//	otherwise one JSON object, strict (no duplicate names, valid UTF-8)
//	screen every member at every depth: key-like names (refused, or
//	  stripped), names equal under case folding, request references
//	typed tools: check the shape (exact names, no null where the field
//	  cannot hold it, required fields present and not empty), decode, and
//	  continue with the canonical form of the decoded value
//	fingerprint: the exact canonical form; identifying: the loose form of
//	  the identifying values, none of them empty
func (t *Tool) parse(raw string) (input, *envelope.Error) {
	c := t.cfg
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
	canon, err := canonjson.Canonical([]byte(trimmed))
	if err != nil {
		return input{}, invalid(fmt.Sprintf("the input is not acceptable JSON (%v); send one JSON object", err))
	}
	tree, err := decodeTree(canon)
	if err != nil {
		return input{}, invalid(fmt.Sprintf("the input is not acceptable JSON (%v); send one JSON object", err))
	}
	var keyLike []string
	if e := c.screen("", tree, &keyLike); e != nil {
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
	}
	var in input
	if ty := t.typed; ty != nil {
		if err := ty.shape.check("", tree); err != nil {
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
			tree, err = decodeTree(canon)
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
		in.forward = string(canon)
	}
	in.fingerprint = c.digest(fingerprintTag, canon)
	var e *envelope.Error
	if in.identifying, e = c.identifyingDigest(tree.(map[string]any), t.typed); e != nil {
		return input{}, e
	}
	return in, nil
}

// parseText parses the input of a tool declared to take plain text.
func (c *config) parseText(text string) (input, *envelope.Error) {
	if looseString(text) == "" {
		return input{}, invalid("the input is empty; say what the tool should do")
	}
	if c.isRef(text) {
		return input{}, refSupplied("the input")
	}
	var in input
	in.forward = text
	in.fingerprint = c.digest(fingerprintTag, appendPart([]byte("text"), text))
	in.identifying = digest(identifyingTag, appendLoose(nil, text, false))
	return in, nil
}

// screen walks the whole input: it collects the paths of key-like members,
// and refuses two names of one object that differ only in case or spacing
// (a tool may read either) and any value equal to a request reference of
// this tool (a key in disguise).
func (c *config) screen(path string, v any, keyLike *[]string) *envelope.Error {
	switch v := v.(type) {
	case map[string]any:
		var seen map[string]string
		if len(v) > 1 {
			seen = make(map[string]string, len(v))
		}
		for _, name := range sortedNames(v) {
			p := join(path, name)
			if c.isKeyLike(name) {
				*keyLike = append(*keyLike, p)
				continue
			}
			if seen != nil {
				l := looseString(name)
				if other, dup := seen[l]; dup {
					return invalid(fmt.Sprintf("the fields %q and %q differ only in case or spacing; send one of them", join(path, other), p))
				}
				seen[l] = name
			}
			if e := c.screen(p, v[name], keyLike); e != nil {
				return e
			}
		}
	case []any:
		for i, item := range v {
			if e := c.screen(fmt.Sprintf("%s[%d]", path, i), item, keyLike); e != nil {
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
// input: the identifying fields, or every member. None may be empty.
func (c *config) identifyingDigest(obj map[string]any, typed *typedInput) (Digest, *envelope.Error) {
	b := make([]byte, 0, 256)
	if c.identify == nil {
		if !slices.ContainsFunc(sortedNames(obj), func(n string) bool { return !isEmpty(obj[n]) }) &&
			(typed == nil || len(typed.shape.names) > 0) {
			return Digest{}, invalid("the input is empty; give the tool's parameters")
		}
		names := make([][2]string, 0, len(obj)) // loose name, name
		for name := range obj {
			names = append(names, [2]string{looseString(name), name})
		}
		slices.SortFunc(names, func(x, y [2]string) int { return strings.Compare(x[0], y[0]) })
		b = binaryLen(append(b, 'o'), len(names))
		for _, n := range names {
			b = appendPart(b, n[0])
			b = appendLoose(b, obj[n[1]], c.exact[n[1]])
		}
		return digest(identifyingTag, b), nil
	}
	var missing []string
	b = binaryLen(append(b, 'f'), len(c.IdentifyingFields))
	for _, f := range c.identifyOrder {
		val, ok := obj[f]
		if !ok && typed == nil {
			// A wrapped tool may read member names loosely: so does its key.
			for name, v := range obj {
				if looseString(name) == looseString(f) {
					val, ok = v, true
				}
			}
		}
		if !ok || isEmpty(val) {
			missing = append(missing, f)
			continue
		}
		b = appendPart(b, looseString(f))
		b = appendLoose(b, val, c.exact[f])
	}
	if len(missing) > 0 {
		return Digest{}, invalid(fmt.Sprintf("missing field %s, needed to identify the action; give its value", strings.Join(quoteAll(missing), ", ")))
	}
	return digest(identifyingTag, b), nil
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
// json.Number and nil.
func decodeTree(canon []byte) (any, error) { return canonjson.Decode(canon) }

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
