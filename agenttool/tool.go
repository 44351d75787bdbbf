package agenttool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync/atomic"

	"github.com/retrysafe/retrysafe/envelope"
)

// EnvelopeHint is appended to every guarded tool's description so that the
// model knows how to read what the tool returns.
const EnvelopeHint = " Returns a JSON envelope: status is success, definite_failure or unknown_outcome; follow its next field" +
	" (continue, fix_input, do_not_retry, wait, ask_human) and never add an idempotency key yourself."

// Tool is a guarded tool: every call goes through key derivation, the store
// and the retry engine, and returns an envelope. By its method set (Name,
// Description, Call) it is a langchaingo tools.Tool; package
// agenttool/langchain has the langchaingo helpers, and agenttool/mcptool
// serves and calls guarded tools over MCP. A Tool is safe for concurrent
// use.
type Tool struct {
	name        string
	description string
	cfg         *config
	run         func(ctx context.Context, in args) (json.RawMessage, error)
	typed       *typedInput              // nil for wrapped tools
	checkInput  func(input string) error // a wrapped InputChecker's, or nil
	schema      json.RawMessage
	flights     flights
	scopeMemo   atomic.Pointer[scopeMemo]
}

// Callable is a tool that takes text and returns text: what [Wrap] guards.
// A langchaingo tools.Tool is one, by its method set.
type Callable interface {
	Name() string
	Description() string
	Call(ctx context.Context, input string) (string, error)
}

var _ Callable = (*Tool)(nil)

// InputChecker is implemented by a Callable that can tell from its input
// alone that it would refuse it (an input schema the input must match).
// [Wrap] asks it after reading the input and before any key is claimed,
// as [New] checks a typed tool's input: an error refuses the call as
// invalid_input with the error's text, nothing recorded and nothing run,
// so that the model's corrected call is a new request, not one the
// refused input's record holds back. It receives the input as the tool
// would (canonical JSON, key-like fields removed under StripModelKeys;
// the trimmed text, for Options.TextInput). A refusal never hides a
// record: an input the store already holds for the action (done before
// the check refused it) goes on, and is replayed or settled as any repeat.
type InputChecker interface {
	CheckInput(input string) error
}

// Wrap guards a tool that takes text, such as a langchaingo tools.Tool. Its
// input must be one JSON object (or, with
// Options.TextInput, plain text). The tool receives the input in the
// canonical form that was digested (members sorted, no insignificant space;
// key-like fields removed under StripModelKeys) and finds the request
// reference on its context ([RequestRef]). Its string result becomes the
// envelope's result: embedded as JSON if it is valid JSON, as a JSON string
// otherwise.
//
// retrysafe cannot see which members a wrapped tool reads, so
// Options.IdentifyingFields is required (unless TextInput): were every
// member part of the key, a model could add one the tool ignores (a null, a
// "nonce") and make a new action of the same email. Other members are
// fingerprinted, so such a variant is refused, never run.
//
// Wrap returns an error wrapping [ErrInvalidOptions] if the options are
// inconsistent, for example a key lifetime shorter than the retry window plus
// the lease.
func Wrap(t Callable, opts Options) (*Tool, error) {
	cfg, err := newConfig(t.Name(), opts)
	if err != nil {
		return nil, err
	}
	if cfg.identify == nil && !cfg.TextInput && cfg.Class != ReadOnly {
		return nil, fmt.Errorf("agenttool: tool %q: a wrapped tool needs IdentifyingFields (the input members that tell one action from another; "+
			"retrysafe cannot see which members the tool reads), or TextInput for plain text; or build it with New: %w", t.Name(), ErrInvalidOptions)
	}
	cfg.defineTool(t.Name(), nil)
	var check func(string) error
	if ic, ok := t.(InputChecker); ok {
		check = ic.CheckInput
	}
	return &Tool{
		name:        t.Name(),
		description: t.Description() + EnvelopeHint,
		cfg:         cfg,
		checkInput:  check,
		run: func(ctx context.Context, in args) (json.RawMessage, error) {
			out, err := t.Call(ctx, in.forward)
			if err != nil {
				return nil, err
			}
			return envelope.ResultFromText(out), nil
		},
		schema: json.RawMessage(`{"type":"object"}`),
	}, nil
}

// New builds a guarded tool from a Go function with a JSON input struct. The
// model's input is checked and decoded strictly before any key is claimed:
// member names must be exactly the struct's JSON names (unknown names, and
// names that differ only in case, are refused with fix_input); null is
// accepted only for pointer and interface fields; other fields without
// omitempty are required and must not be empty. The key and fingerprint follow the
// decoded value, what the function receives. The function's Out is
// marshalled as the envelope's result.
//
// [Tool.Schema] describes In for function-calling models: struct fields by
// their json names, `desc:"…"` tags as descriptions, fields that are neither
// pointers nor omitempty as required (identifying fields must be required).
//
// New returns an error wrapping [ErrInvalidOptions] if In cannot be read
// from JSON, if it has a field whose name looks like an idempotency key, or
// if IdentifyingFields or ExactFields name a field In does not have or an
// optional one.
func New[In, Out any](name, description string, fn func(ctx context.Context, in In) (Out, error), opts Options) (*Tool, error) {
	cfg, err := newConfig(name, opts)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*Tool, error) {
		return nil, fmt.Errorf("agenttool: tool %q: %s: %w", name, fmt.Sprintf(format, args...), ErrInvalidOptions)
	}
	if cfg.TextInput {
		return bad("TextInput is for wrapped tools; a tool built with New reads a JSON object into its input type")
	}
	in := reflect.TypeFor[In]()
	sh, err := shapeOf(in)
	if err != nil {
		return bad("%v", err)
	}
	if path := cfg.keyLikeField(sh, ""); path != "" {
		return bad("input field %q looks like an idempotency key, and such fields are refused from the model; rename it, or set KeyLikeFields", path)
	}
	for _, f := range cfg.IdentifyingFields {
		fd := sh.fields[f]
		switch {
		case fd == nil && sh.near(f, nil) != "":
			return bad("IdentifyingFields names %q; the JSON name of that field is %q", f, sh.near(f, nil))
		case fd == nil:
			return bad("IdentifyingFields names %q, which is not a JSON field of %v (its fields: %s)", f, in, sh.list())
		case !fd.required:
			return bad("identifying field %q is optional (a pointer, or omitempty); an action cannot be told apart by a field the model may leave out", f)
		}
	}
	for _, f := range cfg.ExactFields {
		if sh.fields[f] == nil {
			return bad("ExactFields names %q, which is not a JSON field of %v (its fields: %s)", f, in, sh.list())
		}
	}
	for _, f := range sh.fields {
		if f.exact {
			cfg.exact[f.name] = true
		}
	}
	schema, err := schemaFor(in)
	if err != nil {
		return bad("%v", err)
	}
	cfg.defineTool(name, sh.names)
	return &Tool{
		name:        name,
		description: description + EnvelopeHint,
		cfg:         cfg,
		typed: &typedInput{
			shape: sh,
			decode: func(canonical []byte) (any, error) {
				var v In
				dec := json.NewDecoder(bytes.NewReader(canonical))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&v); err != nil {
					return nil, err
				}
				return v, nil
			},
			encode: func(v any) ([]byte, error) {
				// Addressable, so that fields whose MarshalJSON or
				// MarshalText has a pointer receiver use it.
				in := v.(In)
				return json.Marshal(&in)
			},
		},
		run: func(ctx context.Context, in args) (json.RawMessage, error) {
			out, err := fn(ctx, in.value.(In))
			if err != nil {
				return nil, err
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(out); err != nil {
				// The effect happened; only its report cannot be encoded.
				return json.RawMessage(`null`), nil
			}
			return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
		},
		schema: schema,
	}, nil
}

// keyLikeField returns the path of a field of s, at any depth, whose name
// is key-like, or "".
func (c *config) keyLikeField(s *shape, path string) string {
	if s.elem != nil {
		return c.keyLikeField(s.elem, path)
	}
	for _, name := range s.names {
		p := join(path, name)
		if c.isKeyLike(name) {
			return p
		}
		if found := c.keyLikeField(s.fields[name].shape, p); found != "" {
			return found
		}
	}
	return ""
}

// Name returns the tool's name.
func (t *Tool) Name() string { return t.name }

// Description returns the tool's description, followed by one sentence that
// tells the model how to read the envelope.
func (t *Tool) Description() string { return t.description }

// Schema returns the JSON Schema of the tool's input: derived from In for
// tools built with [New], {"type":"object"} for wrapped tools.
func (t *Tool) Schema() json.RawMessage { return t.schema }

// Call runs the tool for an agent: it returns the envelope's JSON and a nil
// error, always. langchaingo's executor ends the whole run when a tool returns
// an error, and the model must see every outcome, unknown ones above all.
func (t *Tool) Call(ctx context.Context, input string) (string, error) {
	return t.Invoke(ctx, input).String(), nil
}
