package opcmd

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// usage prints every command with its flags.
func (r *runner) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s [global flags] COMMAND [ARGS] [flags]\n\n", r.opts.Name)
	fmt.Fprintf(w, "Lists and settles the actions of retrysafe's guarded tools whose outcome is unknown, and copies one store into another.\n\n")
	fmt.Fprintf(w, "Global flags (before or after the command):\n")
	printFlags(w, r.global, "  ")
	fmt.Fprintf(w, "\nCommands:\n")
	for _, c := range r.all() {
		r.describe(w, c)
	}
	fmt.Fprintf(w, "  help\n      This text (also -h; COMMAND -h for one command).\n")
	fmt.Fprintf(w, "\nExit codes: %d ok, %d the operation failed, %d usage, %d no such record, "+
		"%d held by a live call, or its last attempt may still land (try again later), %d stale (the record had another attempt since it was read; nothing settled), "+
		"%d not awaiting reconciliation (nothing to settle).\n",
		ExitOK, ExitFailed, ExitUsage, ExitNotFound, ExitBusy, ExitStale, ExitNotUnknown)
}

// commandUsage prints one command with its flags.
func (r *runner) commandUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage:\n")
	r.describe(w, c)
}

func (r *runner) describe(w io.Writer, c *command) {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.define(&runner{opts: r.opts}, fs)
	synopsis := []string{c.name}
	if c.args != "" {
		synopsis = append(synopsis, c.args)
	}
	var optional []string // after the required flags
	fs.VisitAll(func(f *flag.Flag) {
		if strings.Contains(f.Usage, "(required") {
			synopsis = append(synopsis, flagName(f))
		} else {
			optional = append(optional, "["+flagName(f)+"]")
		}
	})
	synopsis = append(synopsis, optional...)
	fmt.Fprintf(w, "  %s\n      %s\n", strings.Join(synopsis, " "), c.summary)
	if r.opts.Standalone && c.needsApp {
		fmt.Fprintf(w, "      Not here: it needs the application's tools; run it from the application's mount of agenttool/opcmd.\n")
	}
	printFlags(w, fs, "      ")
}

// printFlags prints a flag set's flags, one a line, with their defaults.
func printFlags(w io.Writer, fs *flag.FlagSet, indent string) {
	fs.VisitAll(func(f *flag.Flag) {
		_, use := flag.UnquoteUsage(f)
		s := flagName(f)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			use += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "%s%-22s %s\n", indent, s, use)
	})
}

// metavars name the values of flags in usage.
var metavars = map[string]string{
	"principal": "P", "tool": "T", "after": "REF", "limit": "N", "by": "WHO", "why": "TEXT",
	"result": "JSON", "attempts": "N", "concurrency": "N", "batch": "N",
	"from": "STORE", "to": "STORE", "from-schema": "SCHEMA", "to-schema": "SCHEMA", "pending": "HOW",
}

// flagName is a flag as usage shows it: -limit N.
func flagName(f *flag.Flag) string {
	name, _ := flag.UnquoteUsage(f)
	if m, ok := metavars[f.Name]; ok {
		name = m
	}
	if name == "" {
		return "-" + f.Name
	}
	return "-" + f.Name + " " + strings.ToUpper(name)
}
