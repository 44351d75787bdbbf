package agenttool

import "time"

// Settings are what a guarded tool was built with, defaults applied. An
// adapter that runs the tool under an engine with timeouts and retries of
// its own (a Temporal activity, a DBOS step) reads them to check that the
// engine's limits fit the tool's.
type Settings struct {
	Class Class
	Fence FenceScope
	// Retry is the policy of retries inside one call, defaults applied.
	Retry RetryPolicy
	// AttemptTimeout bounds one attempt; 0: only the caller's context does.
	AttemptTimeout time.Duration
	LateWindow     time.Duration
	Lease          time.Duration
	WaitTimeout    time.Duration // negative: a call does not wait
	CheckTimeout   time.Duration
	StoreTimeout   time.Duration
	KeyTTL         time.Duration
	ClockSkew      time.Duration
}

// Settings returns the tool's settings, defaults applied.
func (t *Tool) Settings() Settings {
	c := t.cfg
	return Settings{
		Class:          c.Class,
		Fence:          c.Fence,
		Retry:          c.Retry,
		AttemptTimeout: c.AttemptTimeout,
		LateWindow:     c.LateWindow,
		Lease:          c.Lease,
		WaitTimeout:    c.WaitTimeout,
		CheckTimeout:   c.CheckTimeout,
		StoreTimeout:   c.StoreTimeout,
		KeyTTL:         c.KeyTTL,
		ClockSkew:      c.ClockSkew,
	}
}

// InFlight is how long after an attempt ended its request may still land
// at the destination, as the tool counts it: AttemptTimeout (a request
// sent at the attempt's end may take as long), LateWindow and ClockSkew.
// A destination's not-applied answer proves nothing of the attempt until
// then. An adapter that lets anything reach the destination on the
// attempt's behalf after the attempt ended — a user's answer to the
// destination's question — must hold it back as long.
func (s Settings) InFlight() time.Duration {
	return s.AttemptTimeout + s.LateWindow + s.ClockSkew
}
