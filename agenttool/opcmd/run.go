package opcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/internal/printable"
)

// The exit codes of [Run].
const (
	ExitOK         = 0 // the command did what it says
	ExitFailed     = 1 // the operation failed: the store, a reconciler, a compensation; the message says what
	ExitUsage      = 2 // the command line is wrong (a missing or bad flag, an unknown command), or the command needs the application
	ExitNotFound   = 3 // no record with that reference (or not one this operator sees)
	ExitBusy       = 4 // a live call or check holds the record, or its last attempt may still land: try again later
	ExitStale      = 5 // the record had another attempt since it was read: nothing was settled; look again
	ExitNotUnknown = 6 // the record is not awaiting reconciliation: nothing to settle
)

// Options configure [Run]. A nil *Options means all defaults; so does every
// zero field.
type Options struct {
	// Name is how usage lines and messages call the command: "myapp
	// retrysafe" for an application that mounts it under that name. ""
	// means "retrysafe".
	Name string
	// Now is the clock that listings count ages and lapsed leases with. nil
	// means time.Now.
	Now func() time.Time
	// Standalone says that the operator has none of the application's tools
	// (cmd/retrysafe): the commands that need their reconcilers or
	// compensations (reconcile, approve -compensate, sweep) refuse, and say
	// to run them from the application's own mount.
	Standalone bool
	// Flags, if set, adds global flags, given before or after the command: a
	// program that opens its store itself (cmd/retrysafe) names the store
	// with them. A command's own flag of the same name wins after the
	// command.
	Flags func(*flag.FlagSet)
	// Open, if set, gives the operator instead of Run's op argument, once
	// the command line has been read and found valid: settles says whether
	// the command may write (settle a record, sweep), so that a store can be
	// opened read-only when it does not. Its error is printed as it is, and
	// exits with ExitUsage if it wraps ErrUsage, else with ExitFailed.
	Open func(ctx context.Context, settles bool) (*agenttool.Operator, error)
	// OpenStore, if set, opens a store that a command names by its
	// location (copy -from and -to), and returns it with the function that
	// closes it. Without it, copy refuses: cmd/retrysafe has it.
	OpenStore func(ctx context.Context, spec StoreSpec) (store agenttool.Store, close func() error, err error)
	// Commands are commands of the program's own, run and listed in usage
	// after Run's (which win a clash of names): cmd/retrysafe adds migrate.
	Commands []Command
}

// Command is a command a program adds to Run's ([Options].Commands). It
// gets no operator: it works with what the program's global flags name.
type Command struct {
	Name    string // one word, as typed
	Args    string // its positional arguments, for usage: "REF"; "" for none
	Summary string // one sentence, for usage
	// Define defines the command's flags on fs (their usage text says
	// "(required" for a required one) and returns what it does, given its
	// positional arguments: it writes its results to stdout, as one JSON
	// object per line when asJSON. Its error is printed as Run prints
	// errors; one that wraps ErrUsage exits with ExitUsage.
	Define func(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer, asJSON bool) error
}

// ErrUsage marks an error of Options.Open that is the command line's
// fault (no store named, say): Run exits with ExitUsage.
var ErrUsage = errors.New("usage")

// Run runs one operator command, given by args (the command line after the
// program's or the mount's name), against op, and returns the exit code.
// Results go to stdout, progress and errors to stderr. See the package doc
// for the commands and the exit codes.
func Run(ctx context.Context, op *agenttool.Operator, args []string, stdout, stderr io.Writer, opts *Options) int {
	r := &runner{op: op, stdout: stdout, stderr: stderr}
	if opts != nil {
		r.opts = *opts
	}
	if r.opts.Name == "" {
		r.opts.Name = "retrysafe"
	}
	if r.opts.Now == nil {
		r.opts.Now = time.Now
	}
	return r.run(ctx, args)
}

// runner is one run of a command.
type runner struct {
	opts           Options
	op             *agenttool.Operator
	stdout, stderr io.Writer
	json           bool
	cmd            *command
	global         *flag.FlagSet // the global flags, for usage
}

func (r *runner) run(ctx context.Context, args []string) int {
	r.global = r.flagSet(r.opts.Name)
	if r.opts.Flags != nil {
		r.opts.Flags(r.global)
	}
	if err := r.global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			r.usage(r.stdout)
			return ExitOK
		}
		return r.fail(usagef("%v", err))
	}
	args = r.global.Args()
	if len(args) == 0 {
		r.usage(r.stderr)
		return ExitUsage
	}
	name := args[0]
	args = args[1:]
	if name == "help" {
		r.usage(r.stdout)
		return ExitOK
	}
	if name == "resolve" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return r.fail(usagef("resolve needs what was found: resolve applied REF … or resolve not-applied REF …"))
		}
		name, args = "resolve "+args[0], args[1:]
	}
	c := r.lookup(name)
	if c == nil {
		return r.fail(usagef("there is no command %q", name))
	}
	r.cmd = c
	if r.opts.Standalone && c.needsApp {
		return r.fail(needsApp(c.name))
	}
	fs := r.flagSet(r.opts.Name + " " + c.name)
	act := c.define(r, fs)
	// Global flags may also follow the command (retrysafe stats -db FILE),
	// as kubectl's and docker's do; a command's own flag of the same name
	// wins there.
	r.global.VisitAll(func(f *flag.Flag) {
		if fs.Lookup(f.Name) == nil {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		r.commandUsage(r.stdout, c)
		return ExitOK
	}
	if err != nil {
		return r.fail(usagef("%v", err))
	}
	if err := act(ctx, pos); err != nil {
		return r.fail(err)
	}
	return ExitOK
}

// flagSet returns a flag set that reports its errors through Run and knows
// the global -json flag.
func (r *runner) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.BoolVar(&r.json, "json", r.json, "print one JSON object per line instead of a table")
	return fs
}

// parseInterleaved parses flags given before, between and after the
// positional arguments, which it returns.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// operator returns the operator the command works with, opening it if an
// Open function gives it.
func (r *runner) operator(ctx context.Context) (*agenttool.Operator, error) {
	if r.opts.Open != nil {
		op, err := r.opts.Open(ctx, r.cmd.settles)
		if err != nil {
			return nil, err
		}
		r.op, r.opts.Open = op, nil
	}
	if r.op == nil {
		return nil, errors.New("no operator to run the command with (Run was given none)")
	}
	return r.op, nil
}

// usageError is a command line that cannot be run as it is.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// needsApp is the refusal of a command that needs the application's tools.
func needsApp(name string) error {
	return usagef("%s needs the application's own tools (their reconcilers and compensations): "+
		"run it from the application's mount of package agenttool/opcmd (for example: myapp retrysafe %s …)", name, name)
}

// fail prints err for a person and returns its exit code.
func (r *runner) fail(err error) int {
	prefix := r.opts.Name
	if r.cmd != nil {
		prefix += " " + r.cmd.name
	}
	code, hint := classify(err)
	fmt.Fprintf(r.stderr, "%s: %s\n", prefix, printable.Text(err.Error()))
	if hint != "" {
		fmt.Fprintf(r.stderr, "%s\n", hint)
	}
	if code == ExitUsage {
		fmt.Fprintf(r.stderr, "Run '%s help' for the commands and their flags.\n", r.opts.Name)
	}
	return code
}

// classify maps an error to its exit code, with what a person can do
// about it.
func classify(err error) (code int, hint string) {
	var u *usageError
	switch {
	case errors.As(err, &u), errors.Is(err, ErrUsage):
		return ExitUsage, ""
	case errors.Is(err, agenttool.ErrStale):
		return ExitStale, "Nothing was settled: the record is not at the attempts given (another attempt may have run since it was read). Look at it again (show REF) and decide on its current attempts."
	case errors.Is(err, agenttool.ErrBusy):
		return ExitBusy, "A live call or check holds the record; nothing was settled. Try again when it ends."
	case errors.Is(err, agenttool.ErrInFlight):
		return ExitBusy, "Its last attempt may still reach the destination, which would not show it yet; nothing was settled. Decide after the time given."
	case errors.Is(err, agenttool.ErrNotUnknown):
		return ExitNotUnknown, "The record is not awaiting reconciliation (it is settled, or approved for one more attempt): there is nothing to settle."
	case errors.Is(err, agenttool.ErrNotFound):
		return ExitNotFound, "Check the reference (list shows the records awaiting reconciliation); a settled record is deleted after its key lifetime."
	}
	return ExitFailed, ""
}
