package mcpguard

import (
	"maps"
	"slices"
	"time"
)

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

// UsableKeys returns the key ids of the keys a JSON Web Key Set gives the
// guard, sorted: those it can verify with.
func UsableKeys(set []byte) ([]string, error) {
	keys, err := parseJWKS(set)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(keys)), nil
}

// AuthServerClient is the client the guard asks its authorization server
// with.
var AuthServerClient = authServerClient
