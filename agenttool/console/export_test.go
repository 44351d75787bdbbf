package console

// Asked reports how often the agent asked about ref's current outcome, if
// a keeps a request about it.
func (a *Approvals) Asked(ref string) (int, bool) {
	x, ok := a.lookup(ref)
	return x.times, ok
}
