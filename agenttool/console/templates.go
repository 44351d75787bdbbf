package console

import (
	_ "embed"
	"html/template"
)

//go:embed pages.html
var pagesHTML string

// pages are the console's pages, escaped by html/template: every value
// shown (labels, references, answers, reasons) is text, never markup.
var pages = template.Must(template.New("console").Parse(pagesHTML))

// form is one decision the detail page offers.
type form struct {
	Do, Title, Help string
	WithResult      bool // the decision takes a result
	Primary         bool // the decision the action most likely needs
	Reason, Result  string
}

// Forms are the decisions the viewer can make about the action now.
func (p detailPage) Forms() []form {
	var fs []form
	add := func(ok bool, f form) {
		if !ok {
			return
		}
		if f.Do == p.Did {
			f.Reason, f.Result = p.Reason, p.Result
		}
		fs = append(fs, f)
	}
	add(p.Can.Retry, form{Do: doRetry, Title: "Approve one retry", Primary: p.Row.AtMostOnce,
		Help: "You allow the tool to run once more for this action, with the same key: its next call runs it exactly once."})
	add(p.Can.Reconcile, form{Do: doReconcile, Title: "Reconcile now", Primary: !p.Row.AtMostOnce,
		Help: "Ask the destination now what became of this reference, and settle the action by its answer."})
	add(p.Can.Applied, form{Do: doApplied, Title: "Resolve applied", WithResult: true,
		Help: "You checked: the effect happened. Later calls replay it as a success, with the result you give; nothing runs again."})
	add(p.Can.NotApplied, form{Do: doNotApplied, Title: "Resolve not applied",
		Help: "You checked: the effect did not happen. The next call for this action runs the tool once more, with the same key."})
	add(p.Can.Compensate, form{Do: doCompensate, Title: "Compensate",
		Help: "Run the tool's compensating action now, to undo the effect if it happened, and close the action as not applied."})
	return fs
}
