// Command retrysafe lists and settles the actions of retrysafe's guarded
// tools whose outcome is unknown, in a store the application left, with no
// application code: list, show, stats, and resolve (and approve
// -retry-once) when the application's tools use the default Codec; it
// copies one store into another (copy), to move an application from bbolt
// to PostgreSQL; it migrates a PostgreSQL store's schema (migrate); and it
// says what a PostgreSQL store sees of its server's durability and
// replication, and what that means for each class of tool (doctor). It
// also runs a guard in front of any MCP server (guard; package
// agenttool/mcpguard, docs/guard.md).
//
//	go install github.com/retrysafe/retrysafe/cmd/retrysafe@latest
//	retrysafe -db app.db list
//	retrysafe -db app.db show send_email/qlsafj55ze4dcwngvv4shjzqiytdkbwo
//	retrysafe -database-url postgres://ops@db.internal/app -json stats
//	retrysafe -db app.db resolve not-applied send_email/qlsafj… -attempts 1 -by maria -why "not in the mail log"
//	retrysafe copy -from app.db -to postgres://ops@db.internal/app
//	retrysafe -database-url postgres://admin@db.internal/app migrate
//	retrysafe -database-url postgres://ops@db.internal/app doctor
//	retrysafe guard -config guard.json                      # stdio: a desktop client launches it
//	retrysafe guard -config guard.json -listen 127.0.0.1:8931 # streamable HTTP, bearer tokens
//
// The store: -db PATH, a bbolt file, opened read-only unless the command
// settles something; or -database-url URL (default $DATABASE_URL), a
// PostgreSQL database, with -schema (default "retrysafe"). A bbolt file
// belongs to one process: while the application holds it, this program
// cannot open it, and says so. copy names its two stores itself: -from and
// -to, each a bbolt file's path or a postgres:// URL (with -from-schema and
// -to-schema); the source is opened read-only.
//
// No command but migrate (and copy, for its PostgreSQL target, which gets
// the schema it lacks) creates or upgrades a store: a schema or file that
// is missing, or of another version than this program's, is refused and
// left as it is (run the retrysafe command of the application's version).
// On PostgreSQL, list, show and stats open the store read-only and need a
// role that may read: USAGE on the schema and SELECT on its records and
// migrations tables. resolve and approve also need INSERT and UPDATE on
// records and USAGE on the tokens sequence. migrate needs a role that may
// create the schema (CREATE on the database) or owns it. docs/stores.md
// has the grants.
//
// The commands that need the application's tools — reconcile (their
// reconcilers), approve -compensate (their compensating actions) and sweep
// — run from the application's own mount of package agenttool/opcmd; so do
// the others when its tools use a Codec that redacts or encrypts, or a
// DigestKey (-principal needs it to find a principal's records). A record
// this program settles is settled as a tool with the default Codec and a
// key lifetime of -key-ttl (default 24h) would settle it.
//
// The commands, their flags, the -json output and the exit codes are those
// of package agenttool/opcmd: retrysafe help lists them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs one command and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var s storeFlags
	var store io.Closer
	code := opcmd.Run(ctx, nil, args, stdout, stderr, &opcmd.Options{
		Standalone: true,
		Flags:      s.define,
		Commands: []opcmd.Command{
			{Name: "migrate", Summary: s.migrateSummary(), Define: s.defineMigrate},
			{Name: "doctor", Summary: s.doctorSummary(), Define: s.defineDoctor},
			{Name: "guard", Summary: guardSummary(), Define: defineGuard},
		},
		Open: func(ctx context.Context, settles bool) (*agenttool.Operator, error) {
			st, err := s.open(ctx, settles)
			if err != nil {
				return nil, err
			}
			store = st
			op, err := agenttool.NewOperator(st)
			if err != nil {
				return nil, err
			}
			return op.ForAnyTool(s.keyTTL), nil
		},
		OpenStore: openStore,
	})
	if store != nil {
		if err := store.Close(); err != nil && code == opcmd.ExitOK {
			fmt.Fprintf(stderr, "retrysafe: closing the store: %v\n", err)
			code = opcmd.ExitFailed
		}
	}
	return code
}

// storeFlags name the store.
type storeFlags struct {
	db, url, schema string
	keyTTL          time.Duration
}

func (s *storeFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&s.db, "db", "", "the application's bbolt store `PATH` (read-only unless the command settles something)")
	fs.StringVar(&s.url, "database-url", "", "the PostgreSQL `URL` of a pgstore (default $DATABASE_URL)")
	fs.StringVar(&s.schema, "schema", "retrysafe", "the pgstore's `SCHEMA`")
	fs.DurationVar(&s.keyTTL, "key-ttl", 24*time.Hour, "the tools' key lifetime (KeyTTL), for the records this program settles")
}

// agenttool.Store with Close, as both stores have it.
type closingStore interface {
	agenttool.Store
	io.Closer
}

// openStore opens a store that copy names by its location: a PostgreSQL
// URL (postgres:// or postgresql://), or else a bbolt file's path, opened
// read-only unless the command writes to it.
func openStore(ctx context.Context, spec opcmd.StoreSpec) (agenttool.Store, func() error, error) {
	var (
		st  closingStore
		err error
	)
	if strings.HasPrefix(spec.Location, "postgres://") || strings.HasPrefix(spec.Location, "postgresql://") {
		// The source is only read; the target gets the schema it lacks
		// (copy is how a PostgreSQL store is first filled).
		st, err = openPostgres(ctx, pgstore.Options{URL: spec.Location, Schema: spec.Schema, NoMigrate: !spec.Write, ReadOnly: !spec.Write})
	} else {
		if spec.Schema != "" {
			return nil, nil, fmt.Errorf("%w: %s is a bbolt file, which has no schema (a PostgreSQL URL starts with postgres://)", opcmd.ErrUsage, spec.Location)
		}
		st, err = boltstore.Open(spec.Location, &boltstore.Options{ReadOnly: !spec.Write, KeepSchema: true})
	}
	if err != nil {
		return nil, nil, err
	}
	return st, st.Close, nil
}

// openPostgres opens the pgstore at url, in schema ("" for the default),
// waiting 30s at most for the server.
func openPostgres(ctx context.Context, opts pgstore.Options) (closingStore, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := pgstore.Open(ctx, &opts)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("PostgreSQL did not answer within 30s: %w", err)
	case errors.Is(err, pgstore.ErrSchemaOlder):
		return nil, fmt.Errorf("%w\nThis command does not upgrade the schema, which the application's version still uses: run the retrysafe command of that version, or migrate when you upgrade the application", err)
	}
	return st, err
}

// open opens the store the flags name: bbolt read-only unless the command
// settles something.
func (s *storeFlags) open(ctx context.Context, settles bool) (closingStore, error) {
	url := s.url
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	switch {
	case s.db != "" && s.url != "":
		return nil, fmt.Errorf("%w: name one store: -db PATH (bbolt) or -database-url URL (PostgreSQL), not both", opcmd.ErrUsage)
	case s.db != "":
		return boltstore.Open(s.db, &boltstore.Options{ReadOnly: !settles, KeepSchema: true})
	case url != "":
		// Never a migration: a command that only looks opens the store
		// read-only; one that settles, without changing the schema.
		return openPostgres(ctx, pgstore.Options{URL: url, Schema: s.schema, NoMigrate: true, ReadOnly: !settles})
	}
	return nil, fmt.Errorf("%w: name the store: -db PATH (bbolt) or -database-url URL (PostgreSQL; or set DATABASE_URL)", opcmd.ErrUsage)
}

func (s *storeFlags) migrateSummary() string {
	return "Create the PostgreSQL store's schema, or migrate it to this version of retrysafe: as a role that may change the schema (docs/stores.md)."
}

// defineMigrate is the migrate command: pgstore.Migrate on the database
// the global flags name.
func (s *storeFlags) defineMigrate(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer, asJSON bool) error {
	return func(ctx context.Context, args []string, stdout io.Writer, asJSON bool) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q: migrate takes none", opcmd.ErrUsage, args[0])
		}
		url := s.url
		if url == "" {
			url = os.Getenv("DATABASE_URL")
		}
		switch {
		case s.db != "":
			return fmt.Errorf("%w: migrate is for PostgreSQL (-database-url): a bbolt file is upgraded by the application that owns it, when it opens the file", opcmd.ErrUsage)
		case url == "":
			return fmt.Errorf("%w: name the database: -database-url URL (or set DATABASE_URL)", opcmd.ErrUsage)
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		from, to, err := pgstore.Migrate(ctx, &pgstore.Options{URL: url, Schema: s.schema})
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(stdout).Encode(struct {
				Schema string `json:"schema"`
				From   int    `json:"from"`
				To     int    `json:"to"`
			}{s.schema, from, to})
		}
		if from == to {
			_, err = fmt.Fprintf(stdout, "Schema %s is at version %d already: nothing to do.\n", s.schema, to)
			return err
		}
		_, err = fmt.Fprintf(stdout, "Schema %s migrated from version %d to %d.\n", s.schema, from, to)
		return err
	}
}
