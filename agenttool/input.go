package agenttool

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/canonjson"
)

// input is the model's input after parsing, derived once, up front: the key
// and fingerprint are never computed again from something the tool could
// have changed.
type input struct {
	canonical   []byte // the whole input, canonical; fingerprinted
	identifying []byte // the identifying part, canonical; keyed
	forward     string // what the tool receives
	value       any    // decoded input of a typed tool
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
		return input{canonical: text, identifying: text, forward: raw}, nil
	}
	obj, err := canonjson.ParseObject([]byte(trimmed))
	if err != nil {
		return input{}, &envelope.Error{Code: envelope.CodeInvalidInput,
			Message: fmt.Sprintf("the input is not acceptable JSON (%v); send one JSON object", err)}
	}
	var keyFields []string
	for _, m := range obj.Members() {
		if c.keyLike[foldFieldName(m.Name)] {
			keyFields = append(keyFields, m.Name)
		}
	}
	forward := raw
	keep := func(string) bool { return true }
	if len(keyFields) > 0 {
		if c.ModelKeys == RefuseModelKeys {
			return input{}, &envelope.Error{Code: envelope.CodeModelSuppliedKey,
				Message: fmt.Sprintf("remove the field %q: this tool derives its idempotency key itself, and a retry of the same action is safe without one",
					keyFields[0])}
		}
		keep = func(name string) bool { return !c.keyLike[foldFieldName(name)] }
	}
	in := input{canonical: obj.AppendCanonical(nil, keep)}
	if len(keyFields) > 0 {
		forward = string(in.canonical)
	}
	in.forward = forward
	if c.identify == nil {
		in.identifying = in.canonical
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
	in.identifying = obj.AppendCanonical(nil, func(name string) bool { return c.identify[name] })
	return in, nil
}
