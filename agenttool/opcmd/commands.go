package opcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/retrysafe/retrysafe/agenttool"
)

// action runs a command with its positional arguments, once its flags
// are parsed.
type action func(ctx context.Context, args []string) error

// command is one operator command: its flags are defined by define, which
// returns what the command does.
type command struct {
	name     string // "list", "resolve applied"
	args     string // its positional arguments, for usage: "REF"
	summary  string
	settles  bool // it may write to the store
	needsApp bool // it needs the application's tools: a Standalone run refuses it
	define   func(r *runner, fs *flag.FlagSet) action
}

// commands are the operator commands, in the order usage lists them.
var commands = []*command{
	{name: "list", summary: "Records awaiting reconciliation: unknown, or pending with a lapsed lease.", define: (*runner).defineList},
	{name: "show", args: "REF", summary: "One record in full: state, attempts, times, label, resolution and its outcome envelope.", define: (*runner).defineShow},
	{name: "stats", summary: "Records by tool and state; unknown records approved for one more attempt apart.", define: (*runner).defineStats},
	{name: "reconcile", args: "REF", summary: "Ask the destination through the tool's reconciler, and settle the record by its answer.", settles: true, needsApp: true, define: (*runner).defineReconcile},
	{name: "resolve applied", args: "REF", summary: "Settle as applied, with the destination's result: calls replay it as a success.", settles: true, define: (*runner).defineResolveApplied},
	{name: "resolve not-applied", args: "REF", summary: "Settle as not applied: the next call runs the tool once more, with the same key.", settles: true, define: (*runner).defineResolveNotApplied},
	{name: "approve", args: "REF", summary: "Decide on an at-most-once action: one more attempt (-retry-once) or undo it (-compensate).", settles: true, define: (*runner).defineApprove},
	{name: "sweep", summary: "Reconcile every record awaiting reconciliation with the tools' reconcilers, and delete expired ones.", settles: true, needsApp: true, define: (*runner).defineSweep},
	{name: "copy", summary: "Copy every record of one store into another (bbolt to PostgreSQL, say): what is missing, never twice; run it with the application stopped.", define: (*runner).defineCopy},
}

// lookup finds a command by name: one of Run's, or one of the program's.
func (r *runner) lookup(name string) *command {
	for _, c := range r.all() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// all returns Run's commands, then the program's.
func (r *runner) all() []*command {
	all := commands
	for _, extra := range r.opts.Commands {
		define := extra.Define
		all = append(all[:len(all):len(all)], &command{name: extra.Name, args: extra.Args, summary: extra.Summary,
			define: func(r *runner, fs *flag.FlagSet) action {
				run := define(fs)
				return func(ctx context.Context, args []string) error { return run(ctx, args, r.stdout, r.json) }
			}})
	}
	return all
}

func (r *runner) defineList(fs *flag.FlagSet) action {
	principal := fs.String("principal", "", "only this principal's records (the principal the application gives agenttool.WithScope)")
	tool := fs.String("tool", "", "only this tool's records")
	label := fs.String("label", "", "only records whose label (agenttool.WithLabel: a name, a ticket) contains this `TEXT`, in any case")
	after := fs.String("after", "", "start after this reference: the last one of the previous page")
	limit := fs.Int("limit", 100, "at most this many records")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args); err != nil {
			return err
		}
		if *limit <= 0 {
			return usagef("-limit must be at least 1, not %d", *limit)
		}
		op, err := r.operator(ctx)
		if err != nil {
			return err
		}
		op = narrow(op, *principal, *tool)
		recs, err := unknownLabelled(ctx, op, *label, *after, *limit)
		corrupt := agenttool.CorruptKeys(err)
		if err != nil && len(corrupt) == 0 {
			return err
		}
		if err := r.printList(op, recs); err != nil {
			return err
		}
		if len(corrupt) > 0 {
			return fmt.Errorf("%d records could not be read and are not listed (they are left in place): %s", len(corrupt), strings.Join(corrupt, ", "))
		}
		if len(recs) == *limit {
			fmt.Fprintf(r.stderr, "There may be more: %s list -after %s\n", r.opts.Name, recs[len(recs)-1].Key)
		}
		return nil
	}
}

func (r *runner) defineShow(fs *flag.FlagSet) action {
	return func(ctx context.Context, args []string) error {
		ref, err := wantRef(args)
		if err != nil {
			return err
		}
		op, err := r.operator(ctx)
		if err != nil {
			return err
		}
		rec, err := op.Show(ctx, ref)
		if err != nil {
			return err
		}
		var replaced *agenttool.Record
		if rec.Replaces != "" {
			if was, err := op.Show(ctx, rec.Replaces); err == nil {
				replaced = &was
			}
		}
		return r.printRecord(op, rec, replaced)
	}
}

func (r *runner) defineStats(fs *flag.FlagSet) action {
	principal := fs.String("principal", "", "only this principal's records")
	tool := fs.String("tool", "", "only this tool's records")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args); err != nil {
			return err
		}
		op, err := r.operator(ctx)
		if err != nil {
			return err
		}
		counts, err := narrow(op, *principal, *tool).Stats(ctx)
		if err != nil {
			return err
		}
		return r.printStats(counts)
	}
}

func (r *runner) defineReconcile(fs *flag.FlagSet) action {
	by := fs.String("by", "", "who asks (required): recorded with the record if it is settled")
	return func(ctx context.Context, args []string) error {
		ref, err := wantRef(args)
		if err != nil {
			return err
		}
		if err := required("by", *by, "who asks"); err != nil {
			return err
		}
		op, err := r.operator(ctx)
		if err != nil {
			return err
		}
		v, err := op.Reconcile(ctx, ref, *by)
		if err != nil {
			return err
		}
		return r.printVerdict(ref, v)
	}
}

// unknownLabelled lists up to limit records awaiting reconciliation after
// the key after, as Operator.Unknown does, keeping those whose label
// contains label in any case ("": all). Labels are stored through the
// tools' codec, so the store cannot filter them: the pages are read until
// limit records match or none are left.
func unknownLabelled(ctx context.Context, op *agenttool.Operator, label, after string, limit int) ([]agenttool.Record, error) {
	if label == "" {
		return op.Unknown(ctx, after, limit)
	}
	want := strings.ToLower(label)
	var out []agenttool.Record
	var errs []error
	for {
		page, err := op.Unknown(ctx, after, limit)
		if err != nil && len(agenttool.CorruptKeys(err)) == 0 {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
		}
		for _, rec := range page {
			if strings.Contains(strings.ToLower(rec.Label), want) {
				out = append(out, rec)
				if len(out) == limit {
					return out, errors.Join(errs...)
				}
			}
		}
		if len(page) < limit {
			return out, errors.Join(errs...)
		}
		after = page[len(page)-1].Key
	}
}

// narrow limits op to a principal's or a tool's records, if given.
func narrow(op *agenttool.Operator, principal, tool string) *agenttool.Operator {
	if principal != "" {
		op = op.ForPrincipal(principal)
	}
	if tool != "" {
		op = op.ForTool(tool)
	}
	return op
}

// wantArgs refuses positional arguments of a command that takes none.
func wantArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q (flags start with -)", args[0])
	}
	return nil
}

// wantRef returns the one reference a command takes.
func wantRef(args []string) (string, error) {
	switch {
	case len(args) == 0:
		return "", usagef("name the record: its reference (REF), as list prints it")
	case len(args) > 1:
		return "", usagef("one reference at a time: unexpected %q", args[1])
	}
	return args[0], nil
}

// required refuses an empty required flag.
func required(name, value, what string) error {
	if strings.TrimSpace(value) == "" {
		return usagef("-%s is required: say %s (it is recorded with the record)", name, what)
	}
	return nil
}
