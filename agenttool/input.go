package agenttool

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/canonjson"
)

// scratch holds the memory parsing one input needs.
type scratch struct {
	src, dst []byte
	obj      canonjson.Object
}

var scratchPool = sync.Pool{New: func() any { return &scratch{} }}

// input is the model's input after parsing, derived once, up front: the key
// and fingerprint are never computed again from something the tool could
// have changed.
type input struct {
	fingerprint Digest // of the whole input, canonical
	identifying Digest // of the identifying part, canonical
	args
}

// args is what the tool is run with.
type args struct {
	forward string // what the tool receives
	value   any    // decoded input of a typed tool
}

// parseInput parses and checks model input. JSON objects (input starting
// with '{') are canonicalised and checked for key-like fields; any other
// input is plain text, fingerprinted as given after trimming surrounding
// space.
func (c *config) parseInput(raw string) (input, *envelope.Error) {
	trimmed := strings.TrimSpace(raw)
	if !strings.HasPrefix(trimmed, "{") {
		if c.identify != nil {
			return input{}, &envelope.Error{Code: envelope.CodeInvalidInput,
				Message: fmt.Sprintf("expected a JSON object with the fields %s", strings.Join(c.IdentifyingFields, ", "))}
		}
		text, _ := json.Marshal(trimmed)
		fp := sha256.Sum256(append([]byte(fingerprintTag), text...))
		return input{fingerprint: fp, identifying: fp, args: args{forward: raw}}, nil
	}
	// The input's bytes and its canonical form are only digested, never
	// kept: their buffers go back to a pool.
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	sc.src = append(sc.src[:0], trimmed...)
	sc.dst = append(sc.dst[:0], fingerprintTag...)
	obj := &sc.obj
	err := obj.Append(sc.dst, sc.src)
	if err == nil {
		sc.dst = obj.Buffer() // keep the grown buffer
	}
	if err != nil {
		return input{}, &envelope.Error{Code: envelope.CodeInvalidInput,
			Message: fmt.Sprintf("the input is not acceptable JSON (%v); send one JSON object", err)}
	}
	keyField := -1
	for i := range obj.Len() {
		if c.isKeyLike(obj.Name(i)) {
			keyField = i
			break
		}
	}
	var in input
	in.forward = raw
	if keyField < 0 {
		in.fingerprint = sha256.Sum256(obj.Buffer())
	} else {
		if c.ModelKeys == RefuseModelKeys {
			return input{}, &envelope.Error{Code: envelope.CodeModelSuppliedKey,
				Message: fmt.Sprintf("remove the field %q: this tool derives its idempotency key itself, and a retry of the same action is safe without one",
					obj.Name(keyField))}
		}
		stripped := obj.AppendCanonical([]byte(fingerprintTag), func(name []byte) bool { return !c.isKeyLike(name) })
		in.fingerprint = sha256.Sum256(stripped)
		in.forward = string(stripped[len(fingerprintTag):])
	}
	if c.identify == nil {
		in.identifying = in.fingerprint
		return in, nil
	}
	var missing []string
	for f := range c.identify {
		if _, ok := obj.Get(f); !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return input{}, &envelope.Error{Code: envelope.CodeInvalidInput,
			Message: fmt.Sprintf("missing field %s, needed to identify the action", strings.Join(missing, ", "))}
	}
	in.identifying = sha256.Sum256(obj.AppendCanonical([]byte(identifyingTag), func(name []byte) bool { return c.identify[string(name)] }))
	return in, nil
}

// isKeyLike reports whether a field name, folded, is one of the key-like
// fields.
func (c *config) isKeyLike(name []byte) bool {
	var stack [64]byte
	folded := appendFolded(stack[:0], name)
	if c.keyLens&(1<<min(len(folded), 63)) == 0 {
		return false // no key-like field is this long
	}
	return c.keyLike[string(folded)]
}
