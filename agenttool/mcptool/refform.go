package mcptool

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
)

// RefForm is the form in which a tool's calls send their request
// reference in its ToolOptions.RefArgument.
type RefForm uint8

const (
	// RefPlain is the reference itself (agenttool.RequestRef):
	// "book/" and 32 letters and digits of lower-case base32.
	RefPlain RefForm = iota
	// RefUUIDForm is its UUID form (agenttool.RequestUUID, a version 5
	// UUID), for a server that takes a UUID there.
	RefUUIDForm
	// RefUUID4Form is its UUID form with a version 4 UUID's bits
	// (agenttool.RefUUID4), for a server that takes only version 4 UUIDs
	// there (pydantic's UUID4).
	RefUUID4Form
)

// refForms are the forms, in the order RefFormFor prefers them.
var refForms = []RefForm{RefPlain, RefUUIDForm, RefUUID4Form}

// Of returns the value a call whose request reference is ref sends.
func (f RefForm) Of(ref string) string {
	switch f {
	case RefUUIDForm:
		return agenttool.RefUUID(ref)
	case RefUUID4Form:
		return agenttool.RefUUID4(ref)
	}
	return ref
}

func (f RefForm) String() string {
	switch f {
	case RefUUIDForm:
		return "its UUID form"
	case RefUUID4Form:
		return "its version 4 UUID form"
	}
	return "the reference"
}

// ErrRefRefused is wrapped by the error of NewToolWith when the schema of
// a tool's reference argument refuses the form of reference its calls
// would send there (ToolOptions.RefForm): every call would be refused by
// the server, after it was sent.
var ErrRefRefused = errors.New("the argument refuses the request references it would be given")

// RefFormFor reads what the input schema of t says its argument arg
// takes, and returns the form of request reference that fits there: the
// reference itself; its UUID form where the argument asks for a UUID
// ("format": "uuid", or "uuid5", wherever the argument's schema says it:
// under anyOf, behind a $ref) or refuses the reference — a maxLength
// under its length, a pattern — but takes a UUID; or its version 4 UUID
// form where it asks for a version 4 UUID ("format": "uuid4", pydantic's
// UUID4). prefix is what the tool's references start with
// (agenttool.Options.KeyPrefix: by default the guarded tool's name). An
// argument that takes none of them is an error wrapping ErrRefRefused; a
// schema it cannot read says RefPlain.
//
// It advises; ToolOptions.RefForm decides. A server may take any string
// where its schema says "format": "uuid" (format is an annotation unless
// its validator asserts it), and the form is part of the tool's
// definition: after a change, the actions still unknown wait for a
// person. Choose it before the first call, or once they are settled.
func RefFormFor(t *mcp.Tool, arg, prefix string) (RefForm, error) {
	annotated := refSchema(t, arg, false)
	asserted := refSchema(t, arg, true)
	if annotated == nil || asserted == nil {
		return RefPlain, nil
	}
	plain := prefix + "/" + refSample
	var firstErr error
	for _, f := range refForms {
		err := asserted.Validate(map[string]any{arg: f.Of(plain)})
		if err == nil {
			return f, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if annotated.Validate(map[string]any{arg: plain}) != nil {
		return RefPlain, fmt.Errorf("%w: %q takes neither a request reference nor its UUID forms (%s, %s, %s): %s",
			ErrRefRefused, arg, plain, RefUUIDForm.Of(plain), RefUUID4Form.Of(plain), clipped(strings.TrimSpace(firstErr.Error())))
	}
	uuidErr := asserted.Validate(map[string]any{arg: RefUUIDForm.Of(plain)})
	return RefPlain, fmt.Errorf("%w: %q asks for a UUID, but refuses the UUID forms of request references (%s, %s): %s",
		ErrRefRefused, arg, RefUUIDForm.Of(plain), RefUUID4Form.Of(plain), clipped(strings.TrimSpace(uuidErr.Error())))
}

// checkRefForm refuses a form of reference that the schema of t's
// argument arg refuses, as a validator would — its format an annotation
// for the reference itself (the operator's word that the server takes any
// string there), asserted for a UUID form (a UUID goes only where the
// UUID the schema asks for is of its version) — naming another form
// where one fits.
func checkRefForm(t *mcp.Tool, arg, prefix string, f RefForm) error {
	fits := func(f RefForm) error {
		schema := refSchema(t, arg, f != RefPlain)
		if schema == nil {
			return nil
		}
		return schema.Validate(map[string]any{arg: f.Of(prefix + "/" + refSample)})
	}
	err := fits(f)
	if err == nil {
		return nil
	}
	hint := ""
	for _, other := range refForms {
		if other != f && fits(other) == nil {
			hint = fmt.Sprintf("; it takes %s (%s)", other, other.Of(prefix+"/"+refSample))
			break
		}
	}
	return fmt.Errorf("%w: %q refuses %s (%s): %s%s", ErrRefRefused, arg, f, f.Of(prefix+"/"+refSample), clipped(strings.TrimSpace(err.Error())), hint)
}

// refSchema resolves the schema of t's argument arg alone, with what its
// $refs may point to; with assertFormats, each "format" of a UUID in it
// asserted (as a pattern beside it), as a server that validates formats
// reads it. nil if there is none to read.
func refSchema(t *mcp.Tool, arg string, assertFormats bool) *jsonschema.Resolved {
	root, err := readRoot(t)
	if err != nil {
		return nil
	}
	props, _ := root["properties"].(map[string]any)
	prop, ok := props[arg]
	if !ok {
		return nil
	}
	alone := map[string]any{"type": "object", "properties": map[string]any{arg: prop}}
	for _, k := range []string{"$schema", "$id", "$defs", "definitions"} {
		if v, ok := root[k]; ok {
			alone[k] = v
		}
	}
	if assertFormats {
		assertUUIDFormats(alone)
	}
	schema, err := resolveRoot(alone)
	if err != nil {
		return nil
	}
	return schema
}

// assertUUIDFormats adds, beside each "format" of a UUID in the schema v
// ("uuid", or "uuid1" to "uuid8": pydantic's UUID4 and the like), the
// pattern of what it asks for, so that a validator for which format is an
// annotation refuses what a validator that asserts it refuses. Values
// (const, enum, default, examples) are left as they are.
func assertUUIDFormats(v any) {
	switch x := v.(type) {
	case map[string]any:
		if f, ok := x["format"].(string); ok {
			if p, ok := uuidFormats[f]; ok {
				all, _ := x["allOf"].([]any)
				x["allOf"] = append(slices.Clone(all), map[string]any{"pattern": p})
			}
		}
		for k, e := range x {
			switch k {
			case "const", "enum", "default", "examples":
			case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
				// Names, each of a schema.
				if named, ok := e.(map[string]any); ok {
					for _, sub := range named {
						assertUUIDFormats(sub)
					}
				}
			default:
				assertUUIDFormats(e)
			}
		}
	case []any:
		for _, e := range x {
			assertUUIDFormats(e)
		}
	}
}

// uuidFormats are the patterns of the formats of UUIDs: any version, or
// one.
var uuidFormats = func() map[string]string {
	const hex = "[0-9a-fA-F]"
	m := map[string]string{"uuid": "^" + hex + "{8}-" + hex + "{4}-" + hex + "{4}-" + hex + "{4}-" + hex + "{12}$"}
	for v := '1'; v <= '8'; v++ {
		m["uuid"+string(v)] = "^" + hex + "{8}-" + hex + "{4}-" + string(v) + hex + "{3}-" + hex + "{4}-" + hex + "{12}$"
	}
	return m
}()

// refSample is a reference's part after its prefix, with every letter
// and digit a reference may hold.
const refSample = "abcdefghijklmnopqrstuvwxyz234567"
