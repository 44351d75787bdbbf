package opcmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// StoreSpec names a store on the command line, for [Options.OpenStore].
type StoreSpec struct {
	// Location is a bbolt file's path, or a PostgreSQL URL
	// (postgres://…), as given to -from or -to.
	Location string
	// Schema is the pgstore schema given with it (-from-schema,
	// -to-schema); "" means the store's default.
	Schema string
	// Write says that the command writes to the store (a copy's target):
	// one it only reads can be opened read-only.
	Write bool
}

// copyProgressPages is how many pages go by between two progress lines.
const copyProgressPages = 20

func (r *runner) defineCopy(fs *flag.FlagSet) action {
	from := fs.String("from", "", "the store to copy from (required): a bbolt file's PATH, or a PostgreSQL URL")
	to := fs.String("to", "", "the store to copy into (required): a bbolt file's PATH, or a PostgreSQL URL; created if missing")
	fromSchema := fs.String("from-schema", "", "the source's pgstore SCHEMA (default retrysafe)")
	toSchema := fs.String("to-schema", "", "the target's pgstore SCHEMA (default retrysafe)")
	pending := fs.String("pending", "refuse", "what to do with pending records: refuse (report them, copy the rest) or unknown (copy them as unknown outcomes)")
	batch := fs.Int("batch", storekit.DefaultCopyBatch, "records read and written at a time")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args); err != nil {
			return err
		}
		if strings.TrimSpace(*from) == "" || strings.TrimSpace(*to) == "" {
			return usagef("-from and -to are required: the store to copy from and the one to copy into, each a bbolt file's path or a PostgreSQL URL")
		}
		opts := &storekit.CopyOptions{Batch: *batch, Now: r.opts.Now}
		switch *pending {
		case "refuse":
		case "unknown":
			opts.Pending = storekit.PendingAsUnknown
		default:
			return usagef("-pending is refuse or unknown, not %q", *pending)
		}
		if *batch <= 0 {
			return usagef("-batch must be at least 1, not %d", *batch)
		}
		src := StoreSpec{Location: *from, Schema: *fromSchema}
		dst := StoreSpec{Location: *to, Schema: *toSchema, Write: true}
		if src.Location == dst.Location && src.Schema == dst.Schema {
			return usagef("-from and -to name the same store: copy from one store into another")
		}
		if r.opts.OpenStore == nil {
			return usagef("copy opens its two stores itself, and this program cannot: run it from cmd/retrysafe " +
				"(retrysafe copy -from app.db -to postgres://…), or give opcmd.Options.OpenStore")
		}
		source, closeSource, err := r.opts.OpenStore(ctx, src)
		if err != nil {
			return fmt.Errorf("opening the source %s: %w", src.Location, err)
		}
		defer closeSource()
		target, closeTarget, err := r.opts.OpenStore(ctx, dst)
		if err != nil {
			return fmt.Errorf("opening the target %s: %w", dst.Location, err)
		}
		pages := 0
		opts.Issue = func(is storekit.CopyIssue) { r.printIssue(is) }
		opts.Progress = func(rep storekit.CopyReport) {
			if pages++; pages%copyProgressPages == 0 {
				r.printCopyReport(r.stderr, rep, true)
			}
		}
		rep, err := storekit.Copy(ctx, source, target, opts)
		if cerr := closeTarget(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the target: %w", cerr)
		}
		if perr := r.printCopyReport(r.stdout, rep, false); perr != nil && err == nil {
			err = perr
		}
		if err != nil {
			return fmt.Errorf("the copy stopped part-way (what it copied stays; run the same command again to go on): %w", err)
		}
		return incomplete(rep)
	}
}

// incomplete says what a copy left out, and what to do about it; nil if
// it left nothing out.
func incomplete(rep storekit.CopyReport) error {
	if rep.Complete() {
		return nil
	}
	var what []string
	if rep.Pending > 0 {
		what = append(what, fmt.Sprintf("%d pending (their calls may still be running: stop the application, every process that uses the source, and run copy again; "+
			"records still pending then were left by calls that died mid-way: copy them as unknown outcomes with -pending unknown)", rep.Pending))
	}
	if rep.Differ > 0 {
		what = append(what, fmt.Sprintf("%d already in the target with other content (left as they are: the target's may be newer; compare them with show)", rep.Differ))
	}
	if rep.Unreadable > 0 {
		what = append(what, fmt.Sprintf("%d unreadable (left where they are)", rep.Unreadable))
	}
	return fmt.Errorf("%d records were not copied (listed above): %s", rep.Pending+rep.Differ+rep.Unreadable, strings.Join(what, "; "))
}

// copyReportJSON is a copy's report as -json prints it.
type copyReportJSON struct {
	Progress   bool `json:"progress,omitempty"`
	Read       int  `json:"read"`
	Copied     int  `json:"copied"`
	Identical  int  `json:"identical"`
	Expired    int  `json:"expired"`
	Differ     int  `json:"differ"`
	Pending    int  `json:"pending"`
	AsUnknown  int  `json:"as_unknown"`
	Beside     int  `json:"beside"`
	Unreadable int  `json:"unreadable"`
}

// copyIssueJSON is a record a copy left out, as -json prints it.
type copyIssueJSON struct {
	Ref     string `json:"ref"`
	Problem string `json:"problem"` // differs, pending, unreadable, moved beside its slot (copied)
	Detail  string `json:"detail"`
}

func (r *runner) printIssue(is storekit.CopyIssue) {
	if r.json {
		emit(r.stdout, copyIssueJSON{Ref: is.Key, Problem: is.Problem.String(), Detail: is.Detail})
		return
	}
	what := "not copied"
	if is.Problem == storekit.CopyMovedBeside {
		what = "copied"
	}
	fmt.Fprintf(r.stderr, "%s: %s: %s: %s\n", what, cell(is.Key, 0), is.Problem, cell(is.Detail, 0))
}

func (r *runner) printCopyReport(w io.Writer, rep storekit.CopyReport, progress bool) error {
	if r.json {
		return emit(w, copyReportJSON{Progress: progress, Read: rep.Read, Copied: rep.Copied, Identical: rep.Identical,
			Expired: rep.Expired, Differ: rep.Differ, Pending: rep.Pending, AsUnknown: rep.AsUnknown, Beside: rep.Beside, Unreadable: rep.Unreadable})
	}
	if progress {
		_, err := fmt.Fprintf(w, "copying: read %d, copied %d, already there %d, expired %d, not copied %d\n",
			rep.Read, rep.Copied, rep.Identical, rep.Expired, rep.Pending+rep.Differ+rep.Unreadable)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "READ\tCOPIED\tAS UNKNOWN\tBESIDE\tALREADY THERE\tEXPIRED\tPENDING\tDIFFER\tUNREADABLE")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", rep.Read, rep.Copied, rep.AsUnknown, rep.Beside, rep.Identical, rep.Expired,
		rep.Pending, rep.Differ, rep.Unreadable)
	return tw.Flush()
}
