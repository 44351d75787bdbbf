package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
)

// Verdict is a destination's answer about one request reference.
type Verdict uint8

const (
	// CantSay: the check failed or gave no usable answer. It is the zero
	// value, so an answer nobody filled in says nothing.
	CantSay Verdict = iota
	// Applied: the destination has the effect.
	Applied
	// NotApplied: the destination does not have the effect and will not get
	// it from an earlier attempt; a new attempt with the same reference is safe.
	NotApplied
	// Pending: the destination is still working on the request.
	Pending
)

func (v Verdict) String() string {
	switch v {
	case CantSay:
		return "can't say"
	case Applied:
		return "applied"
	case NotApplied:
		return "not applied"
	case Pending:
		return "pending"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Answer is a reconciler's answer.
type Answer struct {
	Verdict Verdict
	// Result is the destination's result, for Applied: JSON, or nil.
	Result json.RawMessage
	// Err is why the check could not tell, for CantSay.
	Err error
	// Fenced, for NotApplied, says that no request still in flight can
	// apply after this answer: the destination refuses a stale one (by a
	// fencing token, or because the effect commits together with its
	// record). Without it, a not-applied answer about an action whose
	// holder may still have a request in flight counts as pending unless
	// the check was asked once that request could no longer land.
	Fenced bool
}

// AppliedWith answers Applied with the destination's result. A result that is
// not valid JSON is carried as a JSON string.
func AppliedWith(result []byte) Answer {
	if len(result) > 0 && !json.Valid(result) {
		result, _ = json.Marshal(string(result))
	}
	return Answer{Verdict: Applied, Result: result}
}

// NotAppliedYet answers NotApplied.
func NotAppliedYet() Answer { return Answer{Verdict: NotApplied} }

// NotAppliedFenced answers NotApplied for a destination that refuses stale
// requests, so that none in flight can apply after the answer (see
// Answer.Fenced).
func NotAppliedFenced() Answer { return Answer{Verdict: NotApplied, Fenced: true} }

// StillPending answers Pending.
func StillPending() Answer { return Answer{Verdict: Pending} }

// CantSayBecause answers CantSay with the error that prevented an answer.
func CantSayBecause(err error) Answer {
	if err == nil {
		err = errors.New("no reason given")
	}
	return Answer{Verdict: CantSay, Err: err}
}

// Request is what a reconciler is asked about: a request reference, with
// what the store knows of its attempts (it survives a restart).
type Request struct {
	// Ref is the request reference the tool passed downstream.
	Ref string
	// Attempts counts the attempts made so far.
	Attempts int
	// LastSent is the latest time an attempt may have been sent (zero if
	// unknown). "Not found, and sent longer ago than the destination takes
	// to show a request" can then be a NotApplied.
	LastSent time.Time
	// Input is the action's input — its canonical JSON, or the text of a
	// tool that takes text — for a tool that keeps it while the action may
	// be unknown (agenttool.Options.KeepInput): a destination that never
	// saw the reference is asked by what the action asked for. nil
	// otherwise, or when it could not be read back.
	Input []byte
}

// Reconciler checks what became of a request. Implementations must be safe
// for concurrent use and should honour ctx.
type Reconciler interface {
	Check(ctx context.Context, req Request) Answer
}

// Func adapts a function of the reference alone to a Reconciler: the
// one-line reconciler.
type Func func(ctx context.Context, ref string) Answer

// Check calls f with req.Ref.
func (f Func) Check(ctx context.Context, req Request) Answer { return f(ctx, req.Ref) }

// RequestFunc adapts a function of the whole request to a Reconciler.
type RequestFunc func(ctx context.Context, req Request) Answer

// Check calls f.
func (f RequestFunc) Check(ctx context.Context, req Request) Answer { return f(ctx, req) }

// PollOptions bound [Poll]. A zero field takes the default in its comment.
type PollOptions struct {
	// MaxChecks is the most checks made; 0 means 5.
	MaxChecks int
	// Interval is the wait before the second check, doubling after each;
	// 0 means 200ms.
	Interval time.Duration
	// MaxInterval caps the wait between checks; 0 means 2s.
	MaxInterval time.Duration
	// MaxWait bounds the whole polling; 0 means 10s. No check starts after it.
	MaxWait time.Duration
}

// Poll returns a Reconciler that checks again while r answers Pending, or
// CantSay with an error that envelope.Classify calls transient, up to the
// bounds of opts; it then returns the last answer. It stops when ctx ends.
func Poll(r Reconciler, opts PollOptions) Reconciler {
	if opts.MaxChecks <= 0 {
		opts.MaxChecks = 5
	}
	if opts.Interval <= 0 {
		opts.Interval = 200 * time.Millisecond
	}
	if opts.MaxInterval <= 0 {
		opts.MaxInterval = 2 * time.Second
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = 10 * time.Second
	}
	return RequestFunc(func(ctx context.Context, req Request) Answer {
		deadline := time.Now().Add(opts.MaxWait)
		wait := opts.Interval
		var a Answer
		for n := 1; ; n++ {
			a = r.Check(ctx, req)
			again := a.Verdict == Pending || (a.Verdict == CantSay && envelope.Classify(a.Err) == envelope.Transient)
			if !again || n >= opts.MaxChecks || time.Now().Add(wait).After(deadline) {
				return a
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return a
			case <-t.C:
			}
			wait = min(2*wait, opts.MaxInterval)
		}
	})
}
