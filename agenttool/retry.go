package agenttool

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// newBackOff builds the backoff of one call. A BackOff is not safe for
// concurrent use, so every call gets a fresh one.
func newBackOff(p RetryPolicy, now func() time.Time) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.InitialInterval),
		backoff.WithMaxInterval(p.MaxInterval),
		backoff.WithMultiplier(p.Multiplier),
		backoff.WithRandomizationFactor(p.RandomizationFactor),
		backoff.WithMaxElapsedTime(p.MaxElapsed),
		backoff.WithClockProvider(clockFunc(now)),
	)
	b.Reset()
	return b
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// sleep waits for d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
