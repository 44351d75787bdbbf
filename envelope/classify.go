package envelope

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
)

// Class says what an error means for the effect of the call that returned it.
type Class int

const (
	// Unknown: the effect may have been applied. It is the zero value, so an
	// error nobody classified is treated the safe way.
	Unknown Class = iota
	// Transient: the effect was not applied and retrying is safe.
	Transient
	// Definite: the effect was not applied and retrying will not help.
	Definite
)

func (c Class) String() string {
	switch c {
	case Unknown:
		return "unknown"
	case Transient:
		return "transient"
	case Definite:
		return "definite"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// marked is an error with a class (and maybe a code) chosen by the tool.
type marked struct {
	err   error
	class Class
	code  string
}

func (m *marked) Error() string     { return m.err.Error() }
func (m *marked) Unwrap() error     { return m.err }
func (m *marked) ErrorCode() string { return m.code }

// MarkDefinite marks err as definite: the effect was not applied and retrying
// will not help. code, if not empty, becomes the envelope's error code (for
// example "invalid_recipient"). MarkDefinite(nil, …) returns nil.
func MarkDefinite(err error, code string) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, class: Definite, code: code}
}

// MarkTransient marks err as transient: the effect was not applied and the
// call may be retried with the same key. MarkTransient(nil) returns nil.
func MarkTransient(err error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, class: Transient}
}

// MarkUnknown marks err as unknown: the effect may have been applied.
// MarkUnknown(nil) returns nil.
func MarkUnknown(err error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, class: Unknown}
}

// Code returns the error code carried by err through an ErrorCode() string
// method anywhere in its chain ([MarkDefinite] and [HTTPError] have one), or
// "" if none.
func Code(err error) string {
	var c interface{ ErrorCode() string }
	if errors.As(err, &c) {
		return c.ErrorCode()
	}
	return ""
}

// Classify says what err means for the effect. In order:
//
//  1. a mark from [MarkDefinite], [MarkTransient] or [MarkUnknown] (the
//     outermost wins);
//  2. behaviour interfaces anywhere in the chain: MaybeApplied() bool true ⇒
//     Unknown; Definite() bool true ⇒ Definite; SafeToRetry() bool true ⇒
//     Transient (the convention of pgconn.SafeToRetry);
//  3. an [HTTPError], by [ClassifyHTTP];
//  4. failures before anything was sent: a dial error (connection refused,
//     dial timeout, no route), a DNS failure, ECONNREFUSED ⇒ Transient;
//  5. anything else — context deadline or cancellation, connection reset,
//     broken pipe, unexpected EOF, unrecognised errors ⇒ Unknown.
//
// Classify(nil) returns Unknown; check for nil first.
func Classify(err error) Class {
	if err == nil {
		return Unknown
	}
	var m *marked
	if errors.As(err, &m) {
		return m.class
	}
	var maybe interface{ MaybeApplied() bool }
	if errors.As(err, &maybe) && maybe.MaybeApplied() {
		return Unknown
	}
	var def interface{ Definite() bool }
	if errors.As(err, &def) && def.Definite() {
		return Definite
	}
	var safe interface{ SafeToRetry() bool }
	if errors.As(err, &safe) && safe.SafeToRetry() {
		return Transient
	}
	var h *HTTPError
	if errors.As(err, &h) {
		return ClassifyHTTP(h.StatusCode, h.Method)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return Transient
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return Transient
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return Transient
	}
	// Deadlines, cancellations, resets, EOFs and everything unrecognised may
	// have happened after the request was written.
	return Unknown
}

// HTTPError is a non-2xx answer from an HTTP destination. Return it (or wrap
// it) from a tool so that [Classify] can read the status.
type HTTPError struct {
	StatusCode int
	Method     string // the request's method; "" is taken as POST
	Message    string // optional detail, such as the response body's error
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("HTTP %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// ErrorCode returns "http_" and the status code, e.g. "http_422".
func (e *HTTPError) ErrorCode() string { return fmt.Sprintf("http_%d", e.StatusCode) }

// ClassifyHTTP classifies an HTTP status for a request with the given method:
//
//   - 408, 425, 429 and 503 ⇒ Transient: the server did not process it;
//   - 409 ⇒ Transient: the IETF idempotency-key draft answers 409 while a
//     request with the same key is still in progress;
//   - any other 4xx, 501 and 505 ⇒ Definite;
//   - 500, 502, 504 and other 5xx ⇒ Unknown for a non-idempotent method
//     (POST, PATCH, ""), Transient for an idempotent one (GET, HEAD, OPTIONS,
//     TRACE, PUT, DELETE);
//   - anything below 400 ⇒ Unknown: it is not an error status, so the caller's
//     reason for failing is not known.
func ClassifyHTTP(status int, method string) Class {
	switch {
	case status == 408 || status == 425 || status == 429 || status == 503 || status == 409:
		return Transient
	case status >= 400 && status < 500, status == 501, status == 505:
		return Definite
	case status >= 500 && status < 600:
		if idempotentMethod(method) {
			return Transient
		}
		return Unknown
	}
	return Unknown
}

func idempotentMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}
