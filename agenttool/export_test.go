package agenttool

// InFlight reports how many keys this tool holds in its in-process waiter
// map; tests check that it drains.
func InFlight(t *Tool) int { return t.flights.len() }

// The default input bounds, for tests that fill them.
const (
	DefaultMaxInput            = defaultMaxInput
	DefaultMaxIdentifyingValue = defaultMaxIdentifyingValue
)
