package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

func (s *storeFlags) doctorSummary() string {
	return "What a PostgreSQL store sees of its server's durability and replication, and what it means for each class of tool."
}

// doctorReport is doctor's -json output.
type doctorReport struct {
	pgstore.Replication
	// Classes says, for each class of tool, whether its claims are made
	// and why.
	Classes map[string]string `json:"classes"`
}

// defineDoctor is the doctor command: pgstore.Store.Replication, read
// through a read-only store, and what it means for each class.
func (s *storeFlags) defineDoctor(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer, asJSON bool) error {
	accept := fs.Bool("accept-async-standbys", false, "evaluate as an application that sets pgstore.Options.AcceptAsyncStandbys")
	window := fs.Duration("failover-window", 0, "the application's pgstore.Options.FailoverWindow (0: the default)")
	return func(ctx context.Context, args []string, stdout io.Writer, asJSON bool) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q: doctor takes none", opcmd.ErrUsage, args[0])
		}
		url := s.url
		if url == "" {
			url = os.Getenv("DATABASE_URL")
		}
		switch {
		case s.db != "":
			return fmt.Errorf("%w: doctor is for PostgreSQL (-database-url): a bbolt file is one process's, on one disk, and fsyncs every commit", opcmd.ErrUsage)
		case url == "":
			return fmt.Errorf("%w: name the database: -database-url URL (or set DATABASE_URL)", opcmd.ErrUsage)
		}
		st, err := openPostgres(ctx, pgstore.Options{URL: url, Schema: s.schema, NoMigrate: true, ReadOnly: true,
			AcceptAsyncStandbys: *accept, FailoverWindow: *window})
		if err != nil {
			return err
		}
		defer st.Close()
		r, err := st.(*pgstore.Store).Replication(ctx)
		if err != nil {
			return err
		}
		classes := doctorClasses(r)
		if asJSON {
			return json.NewEncoder(stdout).Encode(doctorReport{r, classes})
		}
		_, err = io.WriteString(stdout, doctorText(r, classes, time.Now()))
		return err
	}
}

// doctorClasses says what r means for each class of tool.
func doctorClasses(r pgstore.Replication) map[string]string {
	unkeyed := "claims are made: each commits once " + durableWhere(r)
	if err := r.UnkeyedClaims(); err != nil {
		unkeyed = "REFUSED, the tool does not act (store_unavailable): " + strings.TrimSuffix(err.Error(), ": "+storekit.ErrNotDurable.Error())
	}
	window := "off"
	if r.FailoverWindow > 0 {
		window = r.FailoverWindow.String()
	}
	amo := unkeyed
	if r.AcceptAsyncStandbys && r.FailoverWindow > 0 {
		amo += fmt.Sprintf("; for %s after a failover, an action the store has no record of answers unknown_outcome (its record may be one the failover lost)", window)
	}
	keyed := "claims are made on every setup: the destination dedupes the key whatever a failover loses"
	if r.SynchronousStandbyNames == "" && (r.Standbys > 0 || r.PhysicalSlots > 0) {
		keyed += "; but on this asynchronous setup the unknown fence and the notices that hold a reworded copy (another key) may be lost with the last writes before a failover"
	}
	return map[string]string{
		"read_only":    "no claim: runs and retries freely",
		"keyed":        keyed,
		"at_most_once": amo,
		"reconcilable": unkeyed + fmt.Sprintf("; for %s after a failover (failover window), an action the store has no record of asks its destination first", window),
	}
}

// durableWhere says where an Unkeyed claim's commit is durable.
func durableWhere(r pgstore.Replication) string {
	switch {
	case r.SynchronousStandbyNames != "":
		return "a synchronous standby has it (synchronous_standby_names = " + fmt.Sprintf("%q", r.SynchronousStandbyNames) + ")"
	case r.Standbys == 0 && r.PhysicalSlots == 0:
		return "the primary has flushed it; no standby is in sight of this role (one that is, or is fed from a WAL archive, is not seen: see docs/stores.md)"
	}
	return "the primary has flushed it; standbys replicate it asynchronously, a risk the application accepts (AcceptAsyncStandbys)"
}

func doctorText(r pgstore.Replication, classes map[string]string, now time.Time) string {
	var b strings.Builder
	role := "primary"
	if r.Standby {
		role = "standby (in recovery: it takes no writes)"
	}
	fmt.Fprintf(&b, "PostgreSQL %s, %s\n", r.Version, role)
	if !r.Standby {
		fmt.Fprintf(&b, "timeline:                  %d", r.Timeline)
		switch {
		case r.Recorded != r.Timeline:
			fmt.Fprintf(&b, " (the store last worked on timeline %d: a standby was promoted; the next claim records it)\n", r.Recorded)
		case !r.Noticed.IsZero():
			fmt.Fprintf(&b, " (noticed %s, %s ago: a standby was promoted)\n", r.Noticed.UTC().Format(time.RFC3339), now.Sub(r.Noticed).Round(time.Second))
		default:
			b.WriteString(" (the store has worked on no other)\n")
		}
	}
	fmt.Fprintf(&b, "synchronous_commit:        %s for this role's sessions; the store's writes commit as %s\n", r.SynchronousCommit, raised(r.SynchronousCommit))
	names := r.SynchronousStandbyNames
	if names == "" {
		names = "'' (commits wait for no standby)"
	}
	fmt.Fprintf(&b, "synchronous_standby_names: %s\n", names)
	fmt.Fprintf(&b, "standbys in sight:         %d streaming, %d physical replication slots (this role sees that they exist, not how far behind they are)\n",
		r.Standbys, r.PhysicalSlots)
	heard := "yes"
	if !r.HearsWarnings {
		heard = "no: a pool the store did not make (pgstore.ConfigurePool)"
	}
	fmt.Fprintf(&b, "cancelled waits heard:     %s\n\n", heard)
	b.WriteString("What it means for each class of tool:\n")
	for _, c := range []string{"read_only", "keyed", "at_most_once", "reconcilable"} {
		fmt.Fprintf(&b, "  %-13s %s.\n", c, classes[c])
	}
	return b.String()
}

// raised is the level the store's writes commit at, for a session at s.
func raised(s string) string {
	if s == "remote_apply" {
		return s
	}
	return "on"
}
