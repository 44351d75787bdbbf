package agenttool

import (
	"errors"
	"time"
)

// A keyed destination keeps an idempotency key for DestinationKeyTTL: an
// attempt that reached it later could act twice.

// errKeyDeadline is the cause of a keyed attempt's context that ended when
// the destination may forget the key.
var errKeyDeadline = errors.New("the attempt was stopped: the destination may forget its idempotency key now (DestinationKeyTTL)")

// errKeyForgotten is the cause of an unknown outcome that a keyed tool
// cannot retry: the destination may no longer know the key.
var errKeyForgotten = errors.New("an earlier attempt's outcome is unknown, and the destination may have forgotten its idempotency key")

// keyDeadline is when, on this process's clock, the destination may forget
// the key of an action first claimed at created: DestinationKeyTTL later,
// less ClockSkew (another process's clock may have written created). Zero
// if the destination keeps keys forever. Every keyed attempt ends by it.
func (c *config) keyDeadline(created time.Time) time.Time {
	if c.DestinationKeyTTL <= 0 || created.IsZero() {
		return time.Time{}
	}
	return created.Add(c.DestinationKeyTTL - c.ClockSkew)
}

// keyForgotten reports whether the destination may have forgotten the key
// of an action first claimed at created: a retry with it is no longer
// blind-safe.
func (c *config) keyForgotten(created time.Time) bool {
	d := c.keyDeadline(created)
	return !d.IsZero() && !c.Now().Before(d)
}
