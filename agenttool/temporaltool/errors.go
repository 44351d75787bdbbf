package temporaltool

import (
	"errors"
	"fmt"
)

// ErrConfig is wrapped by every error that reports a configuration that
// does not fit: a tool that retries inside one call while Temporal retries
// the activity, a tool without an AttemptTimeout, activity timeouts that
// would cut a call short or let a retry outlive the action's record, or a
// Call the activity cannot scope. Nothing ran. The message names the fix.
var ErrConfig = errors.New("temporaltool: the configuration does not fit the tool")

// The types of the Temporal application errors the activity returns. A
// retry policy may list them in NonRetryableErrorTypes.
const (
	// ErrorTypeNotDone marks an attempt that did nothing and may be sent
	// again under the same key: the store could not be used, every try of
	// the tool failed before it could act, the attempt was cancelled before
	// the tool ran, or another attempt of the same action still runs
	// (in_progress). It is retryable, and carries the envelope and the
	// attempt's number as details.
	ErrorTypeNotDone = "RetrysafeNotDone"
	// ErrorTypeConfig marks an activity that refused to run because its
	// configuration does not fit the tool (see [ErrConfig]). It is not
	// retryable; nothing ran.
	ErrorTypeConfig = "RetrysafeConfig"
)

// errApprovalWithoutStep refuses a ByStep call that carries an approval but
// names no step: its action is the new activity, never the one approved, so
// the approval could only be ignored while the tool runs again.
var errApprovalWithoutStep = fmt.Errorf("%w: Call.Approval is set on a ByStep call without Call.Step: the call is a new activity, "+
	"so a new action that the approval, for the earlier action's reference, cannot reach, and it would run again; name the step (Call.Step) "+
	"on the first call and on the approved one, or use ByInput", ErrConfig)
