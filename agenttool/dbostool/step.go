package dbostool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/internal/durable"
	"github.com/retrysafe/retrysafe/envelope"
)

// Options configure [New]. A nil *Options means all defaults; every zero
// field takes the default in its comment.
type Options struct {
	// Identity says what makes one action. Default: ByStep.
	Identity Identity
	// StepName names the steps in DBOS (GetWorkflowSteps, its console).
	// DBOS compares it when it replays a recorded step: keep it while
	// workflows that ran the step may still be recovered. Default: the
	// tool's name.
	StepName string
	// StepRetries makes DBOS the owner of retries: how many times DBOS
	// runs the step again after an attempt that another attempt under the
	// same key can change (unavailable, and a Keyed tool's
	// outcome_unknown with next wait).
	// The tool must then make one attempt per call (Retry.MaxAttempts 1);
	// New refuses it otherwise (ErrRetriesMultiply). When they run out,
	// the last envelope is the step's outcome. 0, the default: the tool's
	// RetryPolicy owns retries, and DBOS runs the step once (again only
	// when it recovers a workflow whose step never answered).
	StepRetries int
	// StepBaseInterval is DBOS's first wait between runs of the step. 0
	// means DBOS's default, 100ms.
	StepBaseInterval time.Duration
	// StepMaxInterval is DBOS's longest wait between runs of the step. 0
	// means DBOS's default, 5s (or StepBaseInterval, if longer).
	StepMaxInterval time.Duration
	// StepBackoffFactor is the growth of DBOS's wait. 0 means DBOS's
	// default, 2.
	StepBackoffFactor float64
}

// Step runs a guarded tool as a DBOS step. A Step is safe for concurrent
// use, and is built once, outside the workflows that use it.
type Step struct {
	tool     *agenttool.Tool
	class    agenttool.Class
	identity Identity
	// retries: DBOS owns the retries (Options.StepRetries > 0).
	retries bool
	opts    []dbos.StepOption
}

// New returns a Step that runs tool. It refuses a nil tool, options out of
// range, and retries with two owners (ErrRetriesMultiply).
func New(tool *agenttool.Tool, opts *Options) (*Step, error) {
	if tool == nil {
		return nil, fmt.Errorf("dbostool: the tool is nil: %w", ErrInvalidOptions)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("dbostool: tool %q: %s: %w", tool.Name(), fmt.Sprintf(format, args...), ErrInvalidOptions)
	}
	switch {
	case o.Identity > ByInput:
		return nil, bad("unknown Identity %d: use ByStep or ByInput", o.Identity)
	case o.StepRetries < 0:
		return nil, bad("StepRetries %d is negative", o.StepRetries)
	case o.StepBaseInterval < 0 || o.StepMaxInterval < 0:
		return nil, bad("StepBaseInterval %v or StepMaxInterval %v is negative", o.StepBaseInterval, o.StepMaxInterval)
	case o.StepBackoffFactor != 0 && o.StepBackoffFactor < 1:
		return nil, bad("StepBackoffFactor %v is below 1", o.StepBackoffFactor)
	case o.StepRetries == 0 && (o.StepBaseInterval != 0 || o.StepMaxInterval != 0 || o.StepBackoffFactor != 0):
		return nil, bad("StepBaseInterval, StepMaxInterval and StepBackoffFactor shape DBOS's retries, but StepRetries is 0")
	}
	set := tool.Settings()
	if err := checkRetries(tool.Name(), set, o); err != nil {
		return nil, err
	}
	name := o.StepName
	if name == "" {
		name = tool.Name()
	}
	s := &Step{tool: tool, class: set.Class, identity: o.Identity, retries: o.StepRetries > 0}
	s.opts = []dbos.StepOption{dbos.WithStepName(name), dbos.WithStepMaxRetries(o.StepRetries)}
	if s.retries {
		s.opts = append(s.opts, dbos.WithStepRetryPredicate(isRetryError))
		if o.StepBaseInterval != 0 {
			s.opts = append(s.opts, dbos.WithStepBaseInterval(o.StepBaseInterval))
		}
		if o.StepMaxInterval != 0 {
			s.opts = append(s.opts, dbos.WithStepMaxInterval(o.StepMaxInterval))
		}
		if o.StepBackoffFactor != 0 {
			s.opts = append(s.opts, dbos.WithStepBackoffFactor(o.StepBackoffFactor))
		}
	}
	return s, nil
}

// Tool returns the guarded tool the Step runs.
func (s *Step) Tool() *agenttool.Tool { return s.tool }

// Run runs one call of the tool as a step of the workflow whose context
// ctx is, and returns its envelope: the one the call answered, or, when
// DBOS replays a step it recorded, the one it recorded. The envelope is
// never an error: retries that ran out answer their last envelope and a
// nil error. Run returns an error when the Call is invalid
// (ErrInvalidCall, before any step runs), when ctx is not a workflow's,
// or when DBOS stops the workflow: it was cancelled, or another
// execution owns it now (dbos.ErrWorkflowCancelled,
// dbos.ErrConflictingWorkflowID) — the step is then not recorded, the
// workflow must return, and the envelope, if the call answered one, says
// what the call did.
func (s *Step) Run(ctx dbos.Context, call Call) (envelope.Envelope, error) {
	if err := call.check(s.identity); err != nil {
		return envelope.Envelope{}, err
	}
	return settle(dbos.RunAsStep(ctx, s.body(ctx, call), s.opts...))
}

// Go is Run in a goroutine (dbos.Go): steps of one workflow started with
// Go run at once, and each answers on its channel as Run would. DBOS
// numbers a Go step when Go is called, so calls made in the same order
// get the same step IDs when DBOS replays the workflow. The channels work
// with dbos.Select.
func (s *Step) Go(ctx dbos.Context, call Call) (<-chan dbos.StepOutcome[envelope.Envelope], error) {
	if err := call.check(s.identity); err != nil {
		return nil, err
	}
	in, err := dbos.Go(ctx, s.body(ctx, call), s.opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan dbos.StepOutcome[envelope.Envelope], 1)
	go func() {
		defer close(out)
		o := <-in
		env, err := settle(o.Result, o.Err)
		out <- dbos.StepOutcome[envelope.Envelope]{Result: env, Err: err}
	}()
	return out, nil
}

// body is the step: the call's scope on the step's context, one Invoke
// (asked again while its answer is about the call alone, see
// answersTheAction), and, when DBOS owns the retries, a step error for an
// envelope that another attempt can change. outer is the context Run was
// given: DBOS runs a step inside another step as a plain call, with that
// context, and the two would share the outer step's ID.
func (s *Step) body(outer dbos.Context, call Call) dbos.Step[envelope.Envelope] {
	return func(ctx context.Context) (envelope.Envelope, error) {
		if any(ctx) == any(outer) {
			return envelope.Envelope{}, fmt.Errorf("dbostool: tool %q: Run or Go was called inside another step (a RunAsStep of the workflow's own), "+
				"where DBOS runs it as a plain call under the outer step's ID, so every call in it would be one action: call it from the workflow itself: %w",
				s.tool.Name(), ErrInvalidCall)
		}
		ctx, err := scope(ctx, s.identity, call)
		if err != nil {
			return envelope.Envelope{}, err
		}
		env, err := s.invoke(ctx, call)
		if err != nil {
			return env, err
		}
		retry := s.retries && retryable(env, s.class)
		if s.identity == ByStep {
			env = durable.StepAdvice(env)
		}
		if retry {
			return env, &retryError{code: env.Error.Code, ref: env.RequestRef}
		}
		return env, nil
	}
}

// invoke calls the tool until its answer is about the action, not about
// this call alone (answersTheAction): the step's output is what DBOS
// records and replays for good, and "the store could not be read" or
// "another run holds the action" said nothing about it — the action may
// even have been done by an earlier run of the step. It waits between
// calls (the envelope's retry_after, else a growing pause up to
// maxPause) for as long as the workflow runs; when its context ends it
// returns the last envelope with the context's error, and DBOS records
// nothing.
func (s *Step) invoke(ctx context.Context, call Call) (envelope.Envelope, error) {
	pause := firstPause
	for {
		env := s.tool.Invoke(ctx, call.Args)
		if answersTheAction(env) {
			return env, nil
		}
		wait := pause
		if env.RetryAfter > 0 {
			wait = time.Duration(env.RetryAfter) * time.Second
		}
		pause = min(2*pause, maxPause)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return env, ctx.Err()
		case <-t.C:
		}
	}
}

// firstPause and maxPause bound the waits of invoke.
const (
	firstPause = 100 * time.Millisecond
	maxPause   = 5 * time.Second
)

// answersTheAction reports whether env says what became of the call's
// action, so that it may be the step's outcome for good: every envelope
// but those that say only that this call could not find out —
// store_unavailable (the record could not be read or written),
// in_progress (another run of the step holds the action) and cancelled
// (the call's context ended before the tool ran).
func answersTheAction(env envelope.Envelope) bool {
	if env.Error == nil {
		return true
	}
	switch env.Error.Code {
	case envelope.CodeStoreUnavailable, envelope.CodeInProgress, envelope.CodeCancelled:
		return false
	}
	return true
}

// settle turns what DBOS answered for the step into Run's answer: the
// envelope, with an error only where DBOS stops the workflow.
func settle(env envelope.Envelope, err error) (envelope.Envelope, error) {
	if !env.Status.Valid() {
		if err == nil {
			err = errors.New("dbostool: the step answered no envelope")
		}
		return envelope.Envelope{}, err
	}
	if errors.Is(err, dbos.ErrWorkflowCancelled) || errors.Is(err, dbos.ErrConflictingWorkflowID) {
		return env, err
	}
	// nil, or the retries ran out (dbos.ErrMaxStepRetriesExceeded, as DBOS
	// recorded it): the envelope is the answer.
	return env, nil
}
