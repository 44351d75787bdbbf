// Package opcmd is the operator command line of retrysafe: the commands
// that list and settle the actions of guarded tools whose outcome is
// unknown, run against an [agenttool.Operator]. An application mounts it
// under a name of its own, with its own tools — their reconcilers, codecs
// and compensations — so that every command can run:
//
//	if len(os.Args) > 1 && os.Args[1] == "retrysafe" {
//		op, err := agenttool.NewOperator(store, sendEmail, bookFlight)
//		if err != nil { ... }
//		os.Exit(opcmd.Run(ctx, op, os.Args[2:], os.Stdout, os.Stderr, &opcmd.Options{Name: "myapp retrysafe"}))
//	}
//
// cmd/retrysafe is the same commands in a program of its own, for the ones
// that need no application code.
//
// # Commands
//
//	list [-principal P] [-tool T] [-after REF] [-limit N]
//	    the records awaiting reconciliation (unknown, or pending with a
//	    lapsed lease), by reference: reference, tool, state, attempts, age
//	    (since the record last changed), label, last error
//	show REF
//	    one record: state, attempts, created, updated, lease, label,
//	    resolution (verdict, by, why, at) and its decoded outcome envelope
//	stats [-principal P] [-tool T]
//	    records by tool and state, unknown ones approved for a retry apart
//	reconcile REF -by WHO
//	    ask the destination through the tool's reconciler and settle the
//	    record by its answer, which it prints
//	resolve applied REF -attempts N [-result JSON] -by WHO -why TEXT
//	    settle as applied: calls replay a success with that result
//	resolve not-applied REF -attempts N -by WHO -why TEXT
//	    settle as not applied: the next call runs the tool once more
//	approve REF -retry-once -attempts N -by WHO -why TEXT
//	approve REF -compensate -attempts N -by WHO -why TEXT
//	    decide on an at-most-once action: one more attempt, or run the
//	    tool's compensating action
//	sweep -once | sweep [-interval D]
//	    reconcile every record awaiting reconciliation, one progress line
//	    per batch on stderr; -once makes one pass and prints its report,
//	    without it passes run every -interval until the context ends
//	    (Ctrl-C), which exits 0
//	copy -from STORE -to STORE [-from-schema S] [-to-schema S] [-pending refuse|unknown] [-batch N]
//	    copy every record of one store into another (a bbolt file into
//	    PostgreSQL, when an application grows to several replicas), a page
//	    of -batch records at a time, with storekit.Copy: records the target
//	    holds already are left as they are (counted when the same, reported
//	    when not), so a second run copies nothing and a run that stopped
//	    part-way is finished by the same command; pending records are
//	    reported and left out (stop the application first), or copied as
//	    unknown outcomes with -pending unknown; it exits 1 unless every
//	    record is in the target. It opens its stores with
//	    Options.OpenStore (cmd/retrysafe has one; an application's mount
//	    usually has not)
//	help, -h, COMMAND -h
//	    every command with its flags, or one
//
// Flags go before or after a command's reference. -attempts is the
// record's attempts as list or show printed them: every finding and
// decision is about one attempt, and a record that had another attempt
// since is not settled (exit 5). Settling needs -by (who) and, for resolve and approve, -why:
// both are recorded with the record.
//
// # Output
//
// Tables by default (text/tabwriter). The global -json flag, before or
// after the command, prints one JSON object per line instead: a record per
// line for list and show (show adds "outcome", the envelope), a line per
// tool and state for stats, one result line for reconcile, resolve and
// approve ({"ref", "verdict", "by", "why", "attempts", "settled"}), the
// report for sweep (its progress lines go to stderr with "progress":
// true), and for copy a line per record left out ({"ref", "problem",
// "detail"}) then its report. Errors always go to stderr as text that says
// what to do. Text that came from a destination, a model or a person
// (error texts, labels, names, notes) is shown, never obeyed by the
// terminal: its control characters (C0 and C1) and bidi overrides are
// printed as \u escapes — in -json lines, the JSON escapes of the same
// characters.
//
// # Exit codes
//
//	0  ok
//	1  the operation failed (the store, a reconciler, a compensation, a
//	   sweep with failed checks); the message says what
//	2  usage: an unknown command, a missing or bad flag (-by, -why,
//	   -attempts, -result that is not JSON), or a command that needs the
//	   application's tools run from cmd/retrysafe
//	3  no such record (or not one this operator sees)
//	4  busy: a live call or check holds the record; try again
//	5  stale: the record had another attempt since it was read; nothing
//	   was settled
//	6  not awaiting reconciliation: the record is settled, or approved for
//	   one more attempt; nothing to settle
//
// # Caveats
//
//   - A bbolt store belongs to one process: while the application runs,
//     another process (the application's own mount started from a shell,
//     or cmd/retrysafe) cannot open it. Run the commands while the
//     application is stopped, or from inside it (an admin endpoint that
//     passes its arguments to Run); pgstore has no such limit.
//   - Run writes to stdout and stderr from one goroutine at a time; it is
//     safe to call concurrently with distinct writers.
package opcmd
