package mcpguard

import "time"

// SetJWKSMinInterval sets the least time between two fetches of a key
// set, until restore.
func SetJWKSMinInterval(d time.Duration) (restore func()) {
	old := jwksMinInterval
	jwksMinInterval = d
	return func() { jwksMinInterval = old }
}

// SetJWKSMaxAge sets how long fetched keys serve before they are fetched
// again, until restore.
func SetJWKSMaxAge(d time.Duration) (restore func()) {
	old := jwksMaxAge
	jwksMaxAge = d
	return func() { jwksMaxAge = old }
}
