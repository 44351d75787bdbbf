package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Version is the version of the envelope's JSON shape written by this
// package. Version 2 adds retry_after; an envelope of version 1 (as stores
// kept it) is still read, and is a valid one of version 2.
const Version = 2

// MinVersion is the oldest version of the JSON shape this package reads.
const MinVersion = 1

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

// ActionState is the state of an earlier action that a refused call met.
type ActionState string

const (
	// ActionSucceeded: the earlier action was applied, once.
	ActionSucceeded ActionState = "succeeded"
	// ActionFailed: the earlier action was not applied.
	ActionFailed ActionState = "failed"
	// ActionUnknown: the earlier action may have been applied; it awaits
	// reconciliation.
	ActionUnknown ActionState = "unknown"
	// ActionRunning: the earlier action is being attempted by another call.
	ActionRunning ActionState = "running"
)

// Valid reports whether s is one of the four states.
func (s ActionState) Valid() bool {
	switch s {
	case ActionSucceeded, ActionFailed, ActionUnknown, ActionRunning:
		return true
	}
	return false
}

// Earlier describes the action that a refused call met: the one already
// recorded under the same key (key_reused_with_different_input,
// in_progress), or an action of the same tool and scope whose outcome was
// unknown (the unknown fence). A refusal says only that this call did
// nothing; Earlier says whether the earlier action happened, so that the
// model can tell the user the truth.
type Earlier struct {
	RequestRef string          `json:"request_ref"`
	State      ActionState     `json:"state"`
	Result     json.RawMessage `json:"result,omitempty"` // the earlier action's result, when it succeeded and may be shown
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
	Earlier    *Earlier        `json:"earlier,omitempty"`
	// RetryAfter, in seconds, is when calling again can first change the
	// answer: the action is held by a call that has stopped renewing its
	// hold (a process that died or hangs), whose hold ends then; or a
	// person's decision about an unknown outcome waits until its last
	// attempt can no longer arrive. 0 when not known (version 2).
	RetryAfter int    `json:"retry_after,omitempty"`
	Next       Next   `json:"next"`
	Note       string `json:"note,omitempty"`
}

// UnknownRef returns the reference of the action an unknown_outcome is
// about: the earlier action the call was held behind (Earlier, running or
// unknown: the call ran nothing itself), or else the call's own. ok is
// false when e is not an unknown_outcome.
func (e Envelope) UnknownRef() (ref string, ok bool) {
	if e.Status != UnknownOutcome {
		return "", false
	}
	if a := e.Earlier; a != nil && (a.State == ActionUnknown || a.State == ActionRunning) {
		return a.RequestRef, true
	}
	return e.RequestRef, true
}

// Marshal returns the compact JSON form of e. Fields appear in a fixed order;
// the output is what encoding/json writes without HTML escaping.
func (e Envelope) Marshal() ([]byte, error) {
	return e.AppendJSON(make([]byte, 0, e.sizeHint()))
}

// AppendJSON appends the compact JSON form of e to dst, or returns an error
// if e is invalid.
func (e Envelope) AppendJSON(dst []byte) ([]byte, error) {
	if err := e.validateFields(); err != nil {
		return dst, err
	}
	// The result is checked as it is copied: one pass over it.
	b, ok := e.appendJSON(dst)
	if !ok {
		return dst, errResultNotJSON
	}
	return b, nil
}

// sizeHint is at least the length of e's JSON form when no string needs
// escaping and the result is compact.
func (e Envelope) sizeHint() int {
	n := 64 + len(e.Status) + len(e.Tool) + len(e.Next) // with version, attempts and braces
	if e.RequestRef != "" {
		n += 17 + len(e.RequestRef)
	}
	if len(e.Result) > 0 {
		n += 10 + len(e.Result)
	}
	if e.Error != nil {
		n += 33 + len(e.Error.Code) + len(e.Error.Message)
	}
	if e.Note != "" {
		n += 10 + len(e.Note)
	}
	if e.Earlier != nil {
		n += 48 + len(e.Earlier.RequestRef) + len(e.Earlier.State) + len(e.Earlier.Result)
	}
	if e.Replayed {
		n += 16
	}
	if e.Reconciled {
		n += 18
	}
	if e.RetryAfter > 0 {
		n += 36
	}
	return n
}

// appendJSON appends e's JSON form, or returns false if e.Result is not
// valid JSON.
func (e Envelope) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(e.Version), 10)
	b = append(b, `,"status":`...)
	b = appendString(b, string(e.Status))
	b = append(b, `,"tool":`...)
	b = appendString(b, e.Tool)
	if e.RequestRef != "" {
		b = append(b, `,"request_ref":`...)
		b = appendString(b, e.RequestRef)
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(e.Attempts), 10)
	if e.Replayed {
		b = append(b, `,"replayed":true`...)
	}
	if e.Reconciled {
		b = append(b, `,"reconciled":true`...)
	}
	if len(e.Result) > 0 {
		b = append(b, `,"result":`...)
		var ok bool
		if b, ok = appendCompact(b, []byte(e.Result)); !ok {
			return b, false
		}
	}
	if e.Error != nil {
		b = append(b, `,"error":{"code":`...)
		b = appendString(b, e.Error.Code)
		b = append(b, `,"message":`...)
		b = appendString(b, e.Error.Message)
		b = append(b, '}')
	}
	if a := e.Earlier; a != nil {
		b = append(b, `,"earlier":{"request_ref":`...)
		b = appendString(b, a.RequestRef)
		b = append(b, `,"state":`...)
		b = appendString(b, string(a.State))
		if len(a.Result) > 0 {
			b = append(b, `,"result":`...)
			var ok bool
			if b, ok = appendCompact(b, []byte(a.Result)); !ok {
				return b, false
			}
		}
		b = append(b, '}')
	}
	if e.RetryAfter > 0 {
		b = append(b, `,"retry_after":`...)
		b = strconv.AppendInt(b, int64(e.RetryAfter), 10)
	}
	b = append(b, `,"next":`...)
	b = appendString(b, string(e.Next))
	if e.Note != "" {
		b = append(b, `,"note":`...)
		b = appendString(b, e.Note)
	}
	return append(b, '}'), true
}

const hexDigits = "0123456789abcdef"

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// load64 reads s[i:i+8] as a little-endian word.
func load64(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// plainWord reports whether none of the eight bytes of x needs escaping or a
// closer look: no control character, '"', '\\' or non-ASCII byte. For each
// word, (x - n*ones) &^ x & highs is non-zero exactly when some byte of x is
// below n, and a byte equal to c is a zero byte of x ^ (c*ones). (The
// module's canonical-JSON scanner uses the same trick; envelope keeps its own
// so that it imports nothing beyond the standard library.)
func plainWord(x uint64) bool {
	q := x ^ ('"' * ones)
	bs := x ^ ('\\' * ones)
	return ((x-0x20*ones)|(q-ones)&^q|(bs-ones)&^bs|x)&highs == 0
}

// appendString appends s as a JSON string the way encoding/json does without
// HTML escaping: '"', '\\' and control characters escaped, U+2028 and
// U+2029 escaped, invalid UTF-8 replaced by U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) && plainWord(load64(s, i)) {
			i += 8 // eight bytes that need no escape
			continue
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// String returns the JSON form of e, or a JSON description of why e is
// invalid. It never panics.
func (e Envelope) String() string {
	buf := stringBufs.Get().(*[]byte)
	defer stringBufs.Put(buf)
	b, err := e.AppendJSON((*buf)[:0])
	if err != nil {
		return fmt.Sprintf(`{"invalid_envelope":%q}`, err.Error())
	}
	if cap(b) <= maxPooled {
		*buf = b
	}
	return string(b)
}

// stringBufs holds String's scratch buffers, of at most maxPooled bytes.
var stringBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooled = 64 << 10

// ErrInvalid is wrapped by every error that reports an invalid envelope.
var ErrInvalid = errors.New("invalid envelope")

// Validate reports whether e is consistent: a known version and status, valid
// guidance, a result only on success, an error with a code on every failure
// or unknown outcome, and at least one attempt unless the call was refused
// before running.
func (e Envelope) Validate() error {
	if err := e.validateFields(); err != nil {
		return err
	}
	if len(e.Result) > 0 && !validJSON([]byte(e.Result)) {
		return errResultNotJSON
	}
	if e.Earlier != nil && len(e.Earlier.Result) > 0 && !validJSON([]byte(e.Earlier.Result)) {
		return errResultNotJSON
	}
	return nil
}

var errResultNotJSON = fmt.Errorf("%w: result is not valid JSON", ErrInvalid)

// validateFields is Validate without the check that the result is JSON.
func (e Envelope) validateFields() error {
	switch {
	case e.Version < MinVersion || e.Version > Version:
		return fmt.Errorf("%w: version %d, this package reads versions %d to %d", ErrInvalid, e.Version, MinVersion, Version)
	case e.RetryAfter < 0:
		return fmt.Errorf("%w: retry_after %d is negative", ErrInvalid, e.RetryAfter)
	case e.RetryAfter > 0 && e.Version < 2:
		return fmt.Errorf("%w: retry_after is a field of version 2, not %d", ErrInvalid, e.Version)
	case e.RetryAfter > 0 && e.Status == Success:
		return fmt.Errorf("%w: a success carries retry_after", ErrInvalid)
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
	case e.Earlier != nil && (e.Earlier.RequestRef == "" || !e.Earlier.State.Valid()):
		return fmt.Errorf("%w: earlier needs a request_ref and a state (succeeded, failed, unknown, running), not %q", ErrInvalid, e.Earlier.State)
	case e.Earlier != nil && len(e.Earlier.Result) > 0 && e.Earlier.State != ActionSucceeded:
		return fmt.Errorf("%w: earlier carries a result but is %s", ErrInvalid, e.Earlier.State)
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
	if e.Earlier != nil && len(e.Earlier.Result) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, e.Earlier.Result); err != nil {
			return Envelope{}, fmt.Errorf("%w: earlier result: %w", ErrInvalid, err)
		}
		e.Earlier.Result = buf.Bytes()
	}
	return e, nil
}
