package agenttool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/tools"

	"github.com/retrysafe/retrysafe/envelope"
)

// envelopeHint is appended to every guarded tool's description so that the
// model knows how to read what the tool returns.
const envelopeHint = " Returns a JSON envelope: status is success, definite_failure or unknown_outcome; follow its next field" +
	" (continue, fix_input, do_not_retry, wait, ask_human) and never add an idempotency key yourself."

// Tool is a guarded tool: a langchaingo tools.Tool whose every call goes
// through key derivation, the store and the retry engine, and returns an
// envelope. A Tool is safe for concurrent use.
type Tool struct {
	name        string
	description string
	cfg         *config
	run         func(ctx context.Context, in args) (json.RawMessage, error)
	decode      func(forward string) (any, error) // nil for wrapped tools
	schema      json.RawMessage
	flights     flights
	principal   atomic.Pointer[principalMemo]
}

var _ tools.Tool = (*Tool)(nil)

// Wrap guards a langchaingo tool. The tool receives the model's input as it
// was given (or with key-like fields removed, under StripModelKeys) and finds
// the request reference on its context ([RequestRef]). Its string result
// becomes the envelope's result: embedded as JSON if it is valid JSON, as a
// JSON string otherwise.
//
// Wrap returns an error wrapping [ErrInvalidOptions] if the options are
// inconsistent, for example a key lifetime shorter than the retry window plus
// the lease.
func Wrap(t tools.Tool, opts Options) (*Tool, error) {
	cfg, err := newConfig(t.Name(), opts)
	if err != nil {
		return nil, err
	}
	return &Tool{
		name:        t.Name(),
		description: t.Description() + envelopeHint,
		cfg:         cfg,
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
// model's input is decoded into In strictly (unknown fields are refused with
// fix_input) before any key is claimed; the function's Out is marshalled as
// the envelope's result. [Tool.Schema] describes In for function-calling
// models: struct fields by their json names, `desc:"…"` tags as
// descriptions, fields without omitempty as required.
func New[In, Out any](name, description string, fn func(ctx context.Context, in In) (Out, error), opts Options) (*Tool, error) {
	cfg, err := newConfig(name, opts)
	if err != nil {
		return nil, err
	}
	schema, err := schemaFor[In]()
	if err != nil {
		return nil, fmt.Errorf("agenttool: tool %q: %w: %w", name, err, ErrInvalidOptions)
	}
	return &Tool{
		name:        name,
		description: description + envelopeHint,
		cfg:         cfg,
		decode: func(forward string) (any, error) {
			var v In
			dec := json.NewDecoder(strings.NewReader(forward))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&v); err != nil {
				return nil, err
			}
			return v, nil
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

// Name returns the tool's name.
func (t *Tool) Name() string { return t.name }

// Description returns the tool's description, followed by one sentence that
// tells the model how to read the envelope.
func (t *Tool) Description() string { return t.description }

// Schema returns the JSON Schema of the tool's input: derived from In for
// tools built with [New], {"type":"object"} for wrapped tools.
func (t *Tool) Schema() json.RawMessage { return t.schema }

// FunctionDefinition describes the tool for function-calling models.
func (t *Tool) FunctionDefinition() llms.FunctionDefinition {
	return llms.FunctionDefinition{Name: t.name, Description: t.description, Parameters: t.schema}
}

// Call runs the tool for an agent: it returns the envelope's JSON and a nil
// error, always. langchaingo's executor ends the whole run when a tool returns
// an error, and the model must see every outcome, unknown ones above all.
func (t *Tool) Call(ctx context.Context, input string) (string, error) {
	return t.Invoke(ctx, input).String(), nil
}

// refused builds the envelope of a call refused before the tool ran.
func (t *Tool) refused(ref string, e *envelope.Error, next envelope.Next, note string) envelope.Envelope {
	return envelope.Envelope{
		Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: t.name,
		RequestRef: ref, Error: e, Next: next, Note: note,
	}
}
