package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is the version of the envelope's JSON shape written by this package.
const Version = 1

// Status is the outcome of a guarded call. The set is closed: the three
// constants below are the only valid values.
type Status string

const (
	// Success means the effect was applied, once.
	Success Status = "success"
	// DefiniteFailure means the effect was not applied.
	DefiniteFailure Status = "definite_failure"
	// UnknownOutcome means the effect was applied at most once and a record
	// awaits reconciliation.
	UnknownOutcome Status = "unknown_outcome"
)

// Valid reports whether s is one of the three statuses.
func (s Status) Valid() bool {
	return s == Success || s == DefiniteFailure || s == UnknownOutcome
}

// Next is the guidance the model should follow after reading an envelope.
type Next string

const (
	// Continue: the action is done; carry on with the task.
	Continue Next = "continue"
	// FixInput: the input was refused; correct it before calling again.
	FixInput Next = "fix_input"
	// DoNotRetry: do not call the tool again for this action.
	DoNotRetry Next = "do_not_retry"
	// Wait: the action is being handled or the service is unavailable; try the
	// same call again later. The same reference will be used, so it cannot
	// duplicate the effect.
	Wait Next = "wait"
	// AskHuman: a person must decide what happened or what to do.
	AskHuman Next = "ask_human"
)

// Valid reports whether n is one of the defined values.
func (n Next) Valid() bool {
	switch n {
	case Continue, FixInput, DoNotRetry, Wait, AskHuman:
		return true
	}
	return false
}

// Error is the machine-readable reason of a failure or an unknown outcome.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Envelope reports the outcome of one guarded call. It is a plain value: safe
// to copy and to share once built.
type Envelope struct {
	Version    int             `json:"version"`
	Status     Status          `json:"status"`
	Tool       string          `json:"tool"`
	RequestRef string          `json:"request_ref,omitempty"`
	Attempts   int             `json:"attempts"`
	Replayed   bool            `json:"replayed,omitempty"`
	Reconciled bool            `json:"reconciled,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *Error          `json:"error,omitempty"`
	Next       Next            `json:"next"`
	Note       string          `json:"note,omitempty"`
}

// Marshal returns the compact JSON form of e. Fields appear in a fixed order.
func (e Envelope) Marshal() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// String returns the JSON form of e, or a JSON description of why e is
// invalid. It never panics.
func (e Envelope) String() string {
	b, err := e.Marshal()
	if err != nil {
		return fmt.Sprintf(`{"invalid_envelope":%q}`, err.Error())
	}
	return string(b)
}

// ErrInvalid is wrapped by every error that reports an invalid envelope.
var ErrInvalid = errors.New("invalid envelope")

// Validate reports whether e is consistent: a known version and status, valid
// guidance, a result only on success, an error with a code on every failure
// or unknown outcome, and at least one attempt unless the call was refused
// before running.
func (e Envelope) Validate() error {
	switch {
	case e.Version != Version:
		return fmt.Errorf("%w: version %d, this package reads version %d", ErrInvalid, e.Version, Version)
	case !e.Status.Valid():
		return fmt.Errorf("%w: status %q is not one of success, definite_failure, unknown_outcome", ErrInvalid, e.Status)
	case e.Tool == "":
		return fmt.Errorf("%w: tool is empty", ErrInvalid)
	case !e.Next.Valid():
		return fmt.Errorf("%w: next %q is not a known guidance", ErrInvalid, e.Next)
	case e.Attempts < 0:
		return fmt.Errorf("%w: attempts %d is negative", ErrInvalid, e.Attempts)
	case e.Status == Success && e.Error != nil:
		return fmt.Errorf("%w: a success carries an error", ErrInvalid)
	case e.Status == Success && e.Attempts == 0 && !e.Reconciled:
		return fmt.Errorf("%w: a success with no attempt", ErrInvalid)
	case e.Status != Success && (e.Error == nil || e.Error.Code == ""):
		return fmt.Errorf("%w: a %s needs an error with a code", ErrInvalid, e.Status)
	case e.Status != Success && len(e.Result) > 0:
		return fmt.Errorf("%w: a %s carries a result", ErrInvalid, e.Status)
	case len(e.Result) > 0 && !json.Valid(e.Result):
		return fmt.Errorf("%w: result is not valid JSON", ErrInvalid)
	}
	return nil
}

// Parse reads an envelope from its JSON form and validates it. Unknown fields
// are refused, so a typo or a newer shape is reported instead of ignored.
func Parse(data []byte) (Envelope, error) {
	var e Envelope
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Envelope{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Envelope{}, fmt.Errorf("%w: data after the envelope", ErrInvalid)
	}
	if err := e.Validate(); err != nil {
		return Envelope{}, err
	}
	if len(e.Result) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, e.Result); err != nil {
			return Envelope{}, fmt.Errorf("%w: result: %w", ErrInvalid, err)
		}
		e.Result = buf.Bytes()
	}
	return e, nil
}
