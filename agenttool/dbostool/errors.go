package dbostool

import (
	"errors"
	"fmt"
)

// Errors of [New] and of a [Call]. Each message says what to change;
// match them with errors.Is. ErrRetriesMultiply also matches
// ErrInvalidOptions.
var (
	// ErrInvalidOptions: New was given a nil tool or options it cannot
	// work with.
	ErrInvalidOptions = errors.New("invalid dbostool options")
	// ErrRetriesMultiply: DBOS would retry the step (Options.StepRetries)
	// while the tool retries inside each call (its RetryPolicy allows
	// more than one attempt): every DBOS retry would run a whole round of
	// the tool's attempts. Retries need one owner.
	ErrRetriesMultiply = errors.New("DBOS's step retries and the tool's own retries would multiply")
	// ErrInvalidCall: a Call lacks its principal, or sets a field its
	// Step's Identity does not use. Run and Go return it before any step
	// runs, so a workflow's replay meets it at the same place.
	ErrInvalidCall = errors.New("invalid dbostool call")
)

// retryError is the step error of an envelope that calling again under the
// same key can change (retryable), when DBOS owns the retries: DBOS runs
// the step again after its backoff. It never leaves the package: Run and
// Go answer the envelope.
type retryError struct{ code, ref string }

func (e *retryError) Error() string {
	return fmt.Sprintf("dbostool: %s (%s): calling again under the same key may settle it, so DBOS runs the step again", e.code, e.ref)
}

func isRetryError(err error) bool {
	var r *retryError
	return errors.As(err, &r)
}
