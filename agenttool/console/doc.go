// Package console is a web page where people settle the actions of
// guarded tools whose outcome is unknown: an [http.Handler] that an
// application mounts behind its own authentication. It is server-rendered
// HTML (html/template, a little inline CSS, no JavaScript) over an
// [agenttool.Operator].
//
// # Basics
//
//	approvals := &console.Approvals{}
//	chargeCard, _ := agenttool.New("charge_card", "Charge a card.", charge, agenttool.Options{
//		Store: store, Class: agenttool.AtMostOnce, Approver: approvals,
//	})
//	op, _ := agenttool.NewOperator(store, chargeCard, sendEmail)
//	h, _ := console.New(console.Options{
//		Operator:  op,
//		Approvals: approvals,
//		Who: func(r *http.Request) (console.Viewer, error) {
//			u, err := app.SignedInUser(r) // the application's authentication
//			if err != nil {
//				return console.Viewer{}, err
//			}
//			if u.IsAdmin {
//				return console.Viewer{Name: u.Email, All: true}, nil
//			}
//			return console.Viewer{Name: u.Email, Principals: []string{u.TenantPrincipal}}, nil
//		},
//	})
//	mux.Handle("/console/", app.RequireLogin(http.StripPrefix("/console", h)))
//
// The list ("/") shows the actions awaiting a decision: unknown actions of
// at-most-once tools first (nothing runs again for them without a
// person), then the other unknown actions and those whose holder stopped
// (a pending record whose lease lapsed); the oldest first in each group.
// Each row has the tool, the request reference, the label and principal,
// the age, the attempts and the destination's last answer. A detail page
// ("/action?ref=REF") shows one action and the decisions that can work for
// its tool: reconcile now (ask the destination), resolve applied (with an
// optional result as JSON), resolve not applied, approve one retry (for an
// at-most-once tool) and compensate (for a tool with a Compensate
// function). Every decision needs a reason; the Operator records it with
// the viewer's name ("operator:" + Viewer.Name) in the action's record,
// and the console writes an audit log of every decision to
// Options.Logger (the reason of "reconcile now", which the record does not
// keep, goes there only).
//
// Links are relative, so the handler works under any prefix that ends in
// "/", stripped with [http.StripPrefix].
//
// # Who sees what
//
// Options.Who names the viewer of each request from the application's
// authentication, and what they may see: every principal ([Viewer].All),
// or a list of principals. A viewer with a list works through
// [agenttool.Operator.ForPrincipal], one principal at a time: another
// principal's action is neither listed nor shown nor settled, and a
// reference guessed or copied from elsewhere is answered 404, exactly as
// one that does not exist.
//
// Records keep digests of principals, not principals (invariant I8): the
// console cannot read a principal from a record, only check a record
// against a principal the application names. So a scoped viewer's
// principals must be spelled exactly as trusted code passes them to
// agenttool.WithScope, and a viewer of all principals sees a record's
// principal only when the console knows it from an approval request (see
// [Approvals]); otherwise the record's label tells whose action it is.
// Label every call (agenttool.WithLabel: a display name, a ticket) so that
// people can tell. Options.ShowScope says how a principal and its session
// are shown.
//
// # Decisions are POSTs with a token
//
// GET never changes anything. Every decision is a POST to "/action" from
// the detail page's form, and is refused with 403 and a plain message
// unless the form brings back the viewer's token: an HMAC-SHA-256, under
// Options.Secret, of the viewer's name. Another site can make a signed-in
// browser send a POST but cannot read the console's pages, so it cannot
// know the token; a token is refused for any other viewer. Requests that
// the browser marks as cross-site (Sec-Fetch-Site, Origin) are refused
// before the token is read ([http.CrossOriginProtection]). Without a
// Secret, one is drawn at random when the handler is made: pages rendered
// before a restart, or by another replica, are then refused; give
// replicas one Secret. Tokens do not expire; change the Secret to revoke
// them all.
//
// A decision is about the outcome the page showed: the form carries the
// attempts it showed, and a decision about attempt 1 of an action that
// has since run attempt 2 is refused (409), nothing changed, with a
// message that says so. The operator checks it while it holds the record,
// for every decision (agenttool.ErrStale), so that an attempt that runs
// between the page's read and the decision is never settled by it.
//
// # The Approver
//
// [Approvals] is the [agenttool.Approver] of at-most-once tools whose
// unknown outcomes people decide here: it remembers each request, so the
// list shows the action with the call's scope and how often the agent
// asked, and answers Undecided, so the model is told to ask a human.
// The decision itself is made in the console and settled through the
// Operator, in the store: "approve one retry" lets the tool's next call
// for the action run exactly once, and "compensate" runs the tool's
// Compensate at once.
//
// # What is stored where
//
//   - Decisions: in the store, with the action's record (the Operator's
//     Resolution: verdict, by, why, when), durable and seen by every
//     replica.
//   - Approval requests: in memory in [Approvals], per process, the
//     latest per action for the last 1,000 actions; lost on restart, which
//     loses only the scope shown and the count of requests.
//   - The audit log: wherever Options.Logger writes it.
//   - The form secret: in memory, unless Options.Secret is given.
//
// # Caveats
//
//   - The console has no authentication of its own: mount it behind the
//     application's, and make Who fail closed.
//   - The list reads at most Options.Limit actions per principal of the
//     viewer, and says so when there are more.
//   - Settling waits for a live call or check that holds the action, up to
//     the tool's WaitTimeout, inside the request.
package console
