package agenttool

// ToolInfo says what an operator can do with the records of one tool: for
// screens that offer people only the settlements that can work.
type ToolInfo struct {
	Name  string
	Class Class
	// Reconciles: the tool has a Reconciler, so Operator.Reconcile can ask
	// the destination.
	Reconciles bool
	// Compensates: the tool has a Compensate function, so
	// Operator.Compensate can undo the action.
	Compensates bool
}

// Tool describes the tool whose records are named name. ok is false, and
// info names the tool only, for a tool the operator was not given: its
// records are listed, and settled only by an operator made with
// [Operator.ForAnyTool], with no reconciler and no compensation.
func (o *Operator) Tool(name string) (info ToolInfo, ok bool) {
	t, given := o.tools[name]
	if !given {
		return ToolInfo{Name: name}, false
	}
	return ToolInfo{
		Name:        name,
		Class:       t.cfg.Class,
		Reconciles:  t.cfg.Reconciler != nil,
		Compensates: t.cfg.Compensate != nil,
	}, true
}
