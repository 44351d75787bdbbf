package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Options configure [Open]. A nil *Options means all defaults.
type Options struct {
	// URL is the connection string. "" means the DATABASE_URL environment
	// variable.
	URL string
	// Pool is an existing pool to use instead of URL. Close then leaves it
	// open.
	Pool *pgxpool.Pool
	// Schema holds retrysafe's tables. "" means "retrysafe". Letters, digits
	// and underscores only.
	Schema string
	// NoMigrate makes Open check the schema instead of creating or
	// migrating it: a schema that is missing, or at another version than
	// this package's, is refused (ErrNoSchema, ErrSchemaOlder,
	// ErrSchemaNewer) and left as it is. For an application whose role may
	// only read and write the tables, once the migration ran ([Migrate]);
	// without it, Open creates or migrates only a schema that needs it, and
	// needs no more rights than NoMigrate on one that does not.
	NoMigrate bool
	// ReadOnly opens the store to look, not to change: as NoMigrate, and
	// every connection Open makes refuses writes
	// (default_transaction_read_only). For programs that only read, such as
	// the operator command's list, show and stats, under a role that may
	// only read. A Pool given in Options is used as it is.
	ReadOnly bool
	// AcceptAsyncStandbys lets the claims of at-most-once and reconcilable
	// tools go on where the primary streams to a standby asynchronously.
	// Without it they are refused before the tool acts
	// (storekit.ErrNotDurable, with what to change): a failover to such a
	// standby loses the claims of the primary's last moments, and an
	// action whose claim was lost runs again when it is retried after the
	// failover window. Keyed tools go on either way: their destination
	// dedupes the key. docs/stores.md, "High availability", says what each
	// setup guarantees.
	AcceptAsyncStandbys bool
	// FailoverWindow is how long after the store notices a new timeline (a
	// standby was promoted) a claim that finds no record of its key does
	// not take it for a new action, as its record may have been lost: a
	// reconcilable tool asks its destination first, and, with
	// AcceptAsyncStandbys, an at-most-once tool answers unknown_outcome
	// (without it, an at-most-once claim is made only where it is durable,
	// and a missing record means a new action). 0 means
	// DefaultFailoverWindow; a negative window turns it off.
	FailoverWindow time.Duration
}

// Errors of a schema Open will not work with as it is.
var (
	// ErrNoSchema: the schema, or retrysafe's tables in it, do not exist.
	ErrNoSchema = errors.New("no retrysafe schema")
	// ErrSchemaOlder: the schema is at an older version than this
	// package's: the migration has not run yet.
	ErrSchemaOlder = errors.New("the schema is older than this version of retrysafe")
	// ErrSchemaNewer: the schema was migrated by a later version of
	// retrysafe.
	ErrSchemaNewer = errors.New("the schema is newer than this version of retrysafe")
)

// insufficientPrivilege is PostgreSQL's SQLSTATE for "permission denied".
const insufficientPrivilege = "42501"

// Store is a PostgreSQL-backed store. It is safe for concurrent use, by many
// goroutines and many processes.
type Store struct {
	pool      *pgxpool.Pool
	ownsPool  bool
	schema    string
	q         queries
	noMigrate bool // Open checks the schema, never changes it
	// replan is the mode of the statements whose plan depends on the
	// table's size (replanned).
	replan pgx.QueryExecMode
	// Failover (failover.go): whether the pool's connections count their
	// warnings, and the options.
	hears       bool
	acceptAsync bool
	window      time.Duration

	claims   *groupCommit[storekit.ClaimRequest, int64] // claims of new keys (groupcommit.go)
	outcomes *groupCommit[outcome, bool]                // Finish's fenced UPDATEs

	// Tests and benchmarks (export_test.go): failpoints for the next
	// batch of each kind, and batches as pipelined single statements.
	claimFault, finishFault atomic.Int32
	pipelined               bool
	batched                 batchCounts
}

var (
	_ storekit.Store          = (*Store)(nil)
	_ storekit.UnknownClaimer = (*Store)(nil)
	_ storekit.Counter        = (*Store)(nil)
	_ storekit.Importer       = (*Store)(nil)
)

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects and returns the store. Unless Options.NoMigrate or
// ReadOnly is set, it creates or migrates the schema if it needs it; a
// schema already at this package's version is only read, so that a role
// with rights on the tables alone can open it.
func Open(ctx context.Context, opts *Options) (*Store, error) {
	s, err := connect(ctx, opts)
	if err != nil {
		return nil, err
	}
	st, err := s.state(ctx, s.pool, quickExists)
	switch {
	case err != nil:
		err = s.wrap("reading the schema's version", "", err)
	case s.noMigrate || (st.tables && st.version >= len(migrations)):
		err = s.check(st)
	default:
		_, _, err = s.migrate(ctx)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Migrate creates the schema or migrates it to this package's version, as
// Open does without NoMigrate, and reports the version it found (0: none)
// and the one it left. It is the administrator's step when the application
// runs under a role that may not change the schema: run it, as a role
// that may, before the application's new version opens the store. NoMigrate
// and ReadOnly are ignored.
func Migrate(ctx context.Context, opts *Options) (from, to int, err error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.NoMigrate, o.ReadOnly = false, false
	s, err := connect(ctx, &o)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	return s.migrate(ctx)
}

// connect checks the options and makes the store's pool, if it was given
// none.
func connect(ctx context.Context, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = "retrysafe"
	}
	if !schemaName.MatchString(o.Schema) {
		return nil, fmt.Errorf("pgstore: schema name %q: use lower-case letters, digits and underscores", o.Schema)
	}
	pool, owns := o.Pool, false
	if pool == nil {
		url := o.URL
		if url == "" {
			url = os.Getenv("DATABASE_URL")
		}
		if url == "" {
			return nil, errors.New("pgstore: no database: set Options.URL or the DATABASE_URL environment variable")
		}
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return nil, fmt.Errorf("pgstore: %w", err)
		}
		if o.ReadOnly {
			cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
		}
		ConfigurePool(cfg)
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, fmt.Errorf("pgstore: %w", err)
		}
		owns = true
	}
	switch {
	case o.FailoverWindow == 0:
		o.FailoverWindow = DefaultFailoverWindow
	case o.FailoverWindow < 0:
		o.FailoverWindow = 0
	}
	cc := pool.Config().ConnConfig
	hears := hearsWarnings(cc)
	s := &Store{pool: pool, ownsPool: owns, schema: o.Schema, q: newQueries(o.Schema, hears, o.AcceptAsyncStandbys), noMigrate: o.NoMigrate || o.ReadOnly,
		replan: replanned(cc), hears: hears, acceptAsync: o.AcceptAsyncStandbys, window: o.FailoverWindow}
	s.newGroupCommits()
	return s, nil
}

// Close closes the pool if Open made it.
func (s *Store) Close() error {
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// Pool returns the connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema holding the store's tables.
func (s *Store) Schema() string { return s.schema }

// Claim implements storekit.Store: an INSERT … ON CONFLICT DO NOTHING for a
// new key whose slot is free (records_slot refuses it otherwise, on every
// replica alike), shared with concurrent claims (group commit); otherwise a
// read, and a locked read-decide-write only when a record must change.
func (s *Store) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if err := req.Check(); err != nil {
		return storekit.ClaimResult{}, err
	}
	for range 64 { // each round, another claim of the slot made progress
		if req.Replace == nil && req.FoundApplied == "" { // else the rules decide, whatever holds the slot
			token, err := s.claims.do(ctx, req)
			if err != nil {
				return storekit.ClaimResult{}, s.wrap("claim", req.Key, err)
			}
			if token != 0 {
				rec := storekit.Record{
					Key: req.Key, Tool: req.Tool, State: storekit.Pending, Principal: req.Principal, Session: req.Session, Fingerprint: req.Fingerprint,
					Owner: req.Owner, Token: uint64(token), LeaseExpiry: leaseEnd(req.Now.Add(req.Lease)), Created: req.Now, Updated: req.Now,
					Label: req.Label, FenceScope: req.FenceScope, Definition: req.Definition, Input: req.Input,
				}
				return storekit.ClaimResult{Claimed: true, Record: rec}, nil
			}
			// The key exists, or another record holds the slot. Most often
			// nothing needs to change (a replay, a live lease): answer from
			// a plain read. A decision that writes nothing does not depend
			// on the slot.
			existing, err := s.get(ctx, s.pool, req.Key, false)
			if err != nil && !errors.Is(err, storekit.ErrNotFound) {
				return storekit.ClaimResult{}, err
			}
			if existing != nil {
				d, err := storekit.DecideClaim(existing, nil, req, func() (uint64, error) { return 0, errNeedsWrite })
				if err == nil && !d.Write {
					return d.Result, nil
				}
				if err != nil && !errors.Is(err, errNeedsWrite) {
					return storekit.ClaimResult{}, err
				}
			}
		}
		res, again, err := s.claimLocked(ctx, req)
		if err != nil || !again {
			return res, err
		}
	}
	return storekit.ClaimResult{}, fmt.Errorf("pgstore: claim %s: the record kept changing under the claim", req.Key)
}

var errNeedsWrite = errors.New("claim needs a write")

// scopeLock is the advisory lock of a tool's fence scope in s's schema,
// which a locked claim takes before any row.
func (s *Store) scopeLock(tool string, scope storekit.Digest) int64 {
	h := sha256.New()
	h.Write([]byte(s.schema))
	h.Write([]byte{0})
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(scope[:])
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

// rolledBackByTheServer reports whether err is the server's rollback of a
// transaction that met another's locks (a deadlock: claims of two scopes
// whose rows meet, under two fence settings of one tool) or could not be
// serialized: nothing of it was decided, and the claim starts over.
func rolledBackByTheServer(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// errAgain rolls back a locked claim whose insert met a record that
// appeared meanwhile: the claim starts over.
var errAgain = errors.New("claim again")

// claimLocked decides a claim on the rows of its key and of its
// occupants (its slot's holder and, for a claim fenced by session, the
// records beside that slot), locked FOR UPDATE. again reports rows that vanished or
// appeared before they could be locked: the claim starts over.
//
// It first reads the server's replication (failover.go), and records a
// new timeline: an Unkeyed claim is refused where it would not be durable
// where a failover can go, and one whose key has no record within the
// failover window is decided as a record the store may have lost.
func (s *Store) claimLocked(ctx context.Context, req storekit.ClaimRequest) (res storekit.ClaimResult, again bool, err error) {
	env, err := s.catchUp(ctx, req.Now)
	if err != nil {
		return storekit.ClaimResult{}, false, err
	}
	since, lost := env.wentBack(req.Now)
	lost = lost && s.distrustsAbsence(&req)
	// Only a claim the store grants must be durable: a replay, or a claim
	// held back, is answered wherever the store stands.
	durable := func() error {
		if !req.Unkeyed {
			return nil
		}
		return env.UnkeyedClaims()
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return storekit.ClaimResult{}, false, s.wrap("claim", req.Key, err)
	}
	defer conn.Release()
	pc := conn.Conn().PgConn()
	before := warnings(pc)
	// What the claim found of the records it wrote: a give-back puts them
	// back.
	var prior *storekit.Record
	var priorOthers []storekit.Record
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{BeginQuery: syncBegin}, func(tx pgx.Tx) error {
		// The claims of a scope lock its rows one after another: the
		// claim's own, the slot's holder, the records beside the slot.
		// A claim's own record may be another's occupant (an action
		// settled applied aside, a write closed as replaced that keeps a
		// mark), so two claims of one scope would lock the same rows in
		// opposite orders; they take the scope first, and lock its rows
		// one claim at a time.
		if req.FenceScope != (storekit.Digest{}) {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.scopeLock(req.Tool, req.FenceScope)); err != nil {
				return s.wrap("lock the scope of", req.Key, err)
			}
		}
		existing, err := s.get(ctx, tx, req.Key, true)
		if err != nil && !errors.Is(err, storekit.ErrNotFound) {
			return err
		}
		prior = existing
		var occs []storekit.Record
		if req.FenceScope != (storekit.Digest{}) {
			holder, err := scanRecord(tx.QueryRow(ctx, s.q.occupantForUpdate, s.replan, req.Tool, req.FenceScope[:]))
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return s.wrap("read the slot of", req.Key, err)
			}
			if holder != nil && holder.Key != req.Key {
				occs = append(occs, *holder)
			}
		}
		if req.GathersBeside() {
			q, args := s.q.besideForUpdate, []any{s.replan, req.Tool, req.Principal[:], req.Session[:], req.Key}
			if req.FencedByPrincipal() {
				q, args = s.q.besideOfPrincipalForUpdate, []any{s.replan, req.Tool, req.Principal[:], req.Key}
			}
			rows, err := tx.Query(ctx, q, args...)
			if err != nil {
				return s.wrap("read the records beside the slot of", req.Key, err)
			}
			beside, err := s.collect(rows)
			if err != nil {
				return s.wrap("read the records beside the slot of", req.Key, err)
			}
			occs = append(occs, beside...)
		}
		if existing == nil && len(occs) == 0 && req.Replace == nil && req.FoundApplied == "" && !lost {
			// Released or swept meanwhile, or the slot was freed, or the
			// store has just recorded a new timeline: insert again.
			again = true
			return durable()
		}
		next := func() (uint64, error) { return s.nextToken(ctx, tx) }
		var d storekit.ClaimDecision
		if lost {
			d, err = storekit.DecideLost(since, existing, occs, req, next)
		} else {
			d, err = storekit.DecideClaim(existing, occs, req, next)
		}
		if err != nil {
			return err
		}
		res = d.Result
		if res.Claimed {
			if err := durable(); err != nil {
				return err
			}
		}
		for i := range d.Occupants {
			if err := s.put(ctx, tx, &d.Occupants[i]); err != nil {
				return err
			}
			if j := slices.IndexFunc(occs, func(o storekit.Record) bool { return o.Key == d.Occupants[i].Key }); j >= 0 {
				priorOthers = append(priorOthers, occs[j])
			}
		}
		if !d.Write {
			return nil
		}
		if existing != nil {
			return s.put(ctx, tx, &res.Record)
		}
		tag, err := tx.Exec(ctx, s.q.insertRecord, recordArgs(&res.Record)...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errAgain
		}
		return nil
	})
	if errors.Is(err, errAgain) || rolledBackByTheServer(err) {
		return storekit.ClaimResult{}, true, nil
	}
	if err != nil {
		return storekit.ClaimResult{}, false, s.wrap("claim", req.Key, err)
	}
	if res.Claimed && req.Unkeyed {
		why := s.checkDurable(ctx, conn, true, noFault)
		if warnings(pc) > before {
			why = errWaitCancelled
		}
		if why != nil {
			s.giveBackLocked(&req, int64(res.Record.Token), prior, priorOthers)
			return storekit.ClaimResult{}, false, notDurable(req.Key, why)
		}
	}
	return res, again, nil
}

// Finish implements storekit.Store: one UPDATE fenced by the token, shared
// with concurrent outcomes (group commit).
func (s *Store) Finish(ctx context.Context, req storekit.FinishRequest) error {
	rec, err := storekit.DecideFinish(&storekit.Record{Key: req.Key, State: storekit.Pending, Token: req.Token}, req)
	if err != nil {
		return err
	}
	res, err := encodeResolution(rec.Resolution)
	if err != nil {
		return err
	}
	written, err := s.outcomes.do(ctx, outcome{
		key: req.Key, token: int64(req.Token), state: int16(rec.State), attempts: int32(rec.Attempts), outcome: rec.Outcome,
		updated: rec.Updated, expires: nullTime(rec.Expires), retryApproved: rec.RetryApproved, resolution: res,
		leaseExpiry: nullTime(leaseEnd(rec.LeaseExpiry)), noticeUntil: nullTime(rec.NoticeUntil),
	})
	if err != nil {
		return s.wrap("finish", req.Key, err)
	}
	if !written {
		return fmt.Errorf("pgstore: finish %s: no pending record with token %d: %w", req.Key, req.Token, storekit.ErrFenced)
	}
	return nil
}

// Release implements storekit.Store.
func (s *Store) Release(ctx context.Context, key string, token uint64) error {
	tag, err := s.pool.Exec(ctx, s.q.release, key, int64(token))
	if err != nil {
		return s.wrap("release", key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: release %s: no pending record with token %d: %w", key, token, storekit.ErrFenced)
	}
	return nil
}

// Renew implements storekit.Store.
func (s *Store) Renew(ctx context.Context, req storekit.RenewRequest) error {
	tag, err := s.pool.Exec(ctx, s.q.renew, req.Key, int64(req.Token), leaseEnd(req.Until), req.Now)
	if err != nil {
		return s.wrap("renew", req.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: renew %s: no pending record with token %d: %w", req.Key, req.Token, storekit.ErrFenced)
	}
	return nil
}

// Mark implements storekit.Store, on the record's row locked FOR UPDATE.
func (s *Store) Mark(ctx context.Context, req storekit.MarkRequest) (storekit.Record, error) {
	var out storekit.Record
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: syncBegin}, func(tx pgx.Tx) error {
		existing, err := s.get(ctx, tx, req.Key, true)
		if err != nil {
			return err
		}
		rec, write, err := storekit.DecideMark(existing, req)
		if err != nil {
			return err
		}
		out = rec
		if !write {
			return nil
		}
		return s.put(ctx, tx, &rec)
	})
	if errors.Is(err, storekit.ErrNotFound) || errors.Is(err, storekit.ErrInvalidRequest) {
		return storekit.Record{}, err
	}
	if err != nil {
		return storekit.Record{}, s.wrap("mark", req.Key, err)
	}
	return out, nil
}

// Get implements storekit.Store.
func (s *Store) Get(ctx context.Context, key string) (storekit.Record, error) {
	rec, err := s.get(ctx, s.pool, key, false)
	if err != nil {
		return storekit.Record{}, err
	}
	return *rec, nil
}

// Count implements storekit.Counter, with one grouped query.
func (s *Store) Count(ctx context.Context, req storekit.CountRequest) ([]storekit.Count, error) {
	var principal []byte
	if req.Principal != nil {
		principal = req.Principal[:]
	}
	rows, err := s.pool.Query(ctx, s.q.count, s.replan, principal)
	if err != nil {
		return nil, s.wrap("count", "", err)
	}
	defer rows.Close()
	tally := map[storekit.Count]int{}
	for rows.Next() {
		var (
			c     storekit.Count
			state int16
			n     int64
		)
		if err := rows.Scan(&c.Tool, &state, &c.RetryApproved, &n); err != nil {
			return nil, s.wrap("count", "", err)
		}
		c.State = storekit.State(state)
		tally[c] += int(n)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("count", "", err)
	}
	return storekit.SortCounts(tally), nil
}

// Import implements storekit.Importer with COPY, in one transaction, and
// moves the token sequence past the imported tokens — far enough past
// that a claim on another replica meanwhile hands out no token twice.
func (s *Store) Import(ctx context.Context, recs []storekit.Record) error {
	rows := make([][]any, len(recs))
	for i := range recs {
		r := &recs[i]
		if err := storekit.ValidateImport(r); err != nil {
			return err
		}
		if rows[i] = recordArgs(r); rows[i] == nil {
			return fmt.Errorf("pgstore: importing %s: its resolution cannot be encoded: %w", r.Key, storekit.ErrInvalidRequest)
		}
	}
	// The slots the records would hold are checked first, for an error
	// that names the record; the records_slot index has the last word.
	checkSlots := func(q querier) error {
		return storekit.CheckImportSlots(recs, func(sl storekit.Slot) (string, error) {
			var key string
			err := q.QueryRow(ctx, s.q.slotHolder, s.replan, sl.Tool, sl.Scope[:]).Scan(&key)
			if errors.Is(err, pgx.ErrNoRows) {
				return "", nil
			}
			return key, err
		})
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: syncBegin}, func(tx pgx.Tx) error {
		if err := checkSlots(tx); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{s.schema, "records"}, strings.Split(written, ", "), pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		var most uint64
		for i := range recs {
			most = max(most, recs[i].Token)
		}
		// Imports raise the sequence one at a time: each reads it and then
		// sets it, and a second import's set could otherwise take it back
		// below the first's tokens.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('retrysafe tokens ' || $1))`, s.schema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.q.raiseTokens, int64(most))
		return err
	})
	var held *storekit.SlotHeldError
	if errors.As(err, &held) {
		return fmt.Errorf("pgstore: %w", err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "records_slot" {
		// A claim took a slot between the check and the copy.
		if err := checkSlots(s.pool); err != nil {
			return fmt.Errorf("pgstore: %w", err)
		}
		return fmt.Errorf("pgstore: importing: %w", &storekit.SlotHeldError{})
	}
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("pgstore: importing: a key exists (%s): %w", pgErr.Detail, storekit.ErrInvalidRequest)
	}
	if err != nil {
		return s.wrap("import", "", err)
	}
	return s.analyzeAfter(ctx, len(recs))
}

// analyzeAfter brings the planner's statistics of the records table up to
// date after an import of n records that grew it by a tenth or more since
// it was last analysed (or that filled a table never analysed), as
// autovacuum would, later: until then the plans that read the open
// records take the table for the size it had, and a page of a listing can
// read every open record rather than its page. A table left with fewer
// records than autovacuum first analyses is not analysed (migration 16
// says why). ANALYZE needs the table's owner; a role that is not is told
// by a warning, and the import stands.
func (s *Store) analyzeAfter(ctx context.Context, n int) error {
	records := pgx.Identifier{s.schema, "records"}.Sanitize()
	var known float64
	if err := s.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, records).Scan(&known); err != nil {
		return s.wrap("import", "", err)
	}
	if float64(n) < 0.1*max(known, 0)+50 || max(known, 0)+float64(n) < firstAnalysis/2 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE `+records); err != nil {
		return s.wrap("analyze after import", "", err)
	}
	return nil
}

// CountUnknown implements storekit.Counter, from the index of open records.
func (s *Store) CountUnknown(ctx context.Context) (int, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, s.q.countUnknown, s.replan).Scan(&n); err != nil {
		return 0, s.wrap("count", "", err)
	}
	return int(n), nil
}

// sweepStep is the records a sweep step deletes unless asked otherwise.
// A step's writes share the server's cores and the disk with calls'
// commits, and a call that meets a step is slowed for as long as it runs:
// at a million records, steps of 100 put the p99 of lone calls during a
// sweep at 3.4–3.6 times the p99 just before it, steps of 50 at 1.5–1.8
// (the growth benchmark, three runs each). A sweep with a backlog makes
// its steps bigger where that pays (storekit.SweepExpired).
const sweepStep = 50

// Sweep implements storekit.Store: one step, chosen by the records_expires
// index, oldest first.
func (s *Store) Sweep(ctx context.Context, req storekit.SweepRequest) (int, error) {
	limit := req.Limit
	if limit <= 0 {
		limit = sweepStep
	}
	tag, err := s.pool.Exec(ctx, s.q.sweep, s.replan, req.Now, limit)
	if err != nil {
		return 0, s.wrap("sweep", "", err)
	}
	return int(tag.RowsAffected()), nil
}

// ListUnknown implements storekit.Store.
func (s *Store) ListUnknown(ctx context.Context, req storekit.ListRequest) ([]storekit.Record, error) {
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	var principal, session []byte
	if req.Principal != nil {
		principal = req.Principal[:]
	}
	if req.Session != nil {
		session = req.Session[:]
	}
	if req.Tool != "" && req.Principal != nil {
		rows, err := s.pool.Query(ctx, s.q.listScope, s.replan, req.Now, req.After, principal, limit, req.Tool, session)
		if err != nil {
			return nil, s.wrap("list", "", err)
		}
		return s.collect(rows)
	}
	if req.Principal != nil {
		rows, err := s.pool.Query(ctx, s.q.listPrincipal, s.replan, req.Now, req.After, principal, limit, session)
		if err != nil {
			return nil, s.wrap("list", "", err)
		}
		return s.collect(rows)
	}
	rows, err := s.pool.Query(ctx, s.q.listUnknown, s.replan, req.Now, req.After, principal, limit, req.Tool, session)
	if err != nil {
		return nil, s.wrap("list", "", err)
	}
	return s.collect(rows)
}

// ClaimUnknown implements storekit.UnknownClaimer with FOR UPDATE SKIP
// LOCKED: concurrent sweepers get disjoint records and never wait.
func (s *Store) ClaimUnknown(ctx context.Context, req storekit.ClaimUnknownRequest) ([]storekit.ClaimResult, error) {
	if req.Lease <= 0 || req.Limit <= 0 {
		return nil, fmt.Errorf("pgstore: claim unknown with lease %v and limit %d: %w", req.Lease, req.Limit, storekit.ErrInvalidRequest)
	}
	// A takeover hands out tokens: on the timeline the store recorded
	// (failover.go).
	env, err := s.catchUp(ctx, req.Now)
	if err != nil {
		return nil, err
	}
	// Within the failover window, a record is what the store kept: a later
	// claim of it, and the attempt that claim sent, may be what it lost.
	// Its last attempt counts as sent when the store noticed, at the
	// earliest, as storekit.DecideLost counts it.
	since, lost := env.wentBack(req.Now)
	if req.Now.Before(since) {
		since = req.Now
	}
	var principal []byte
	if req.Principal != nil {
		principal = req.Principal[:]
	}
	rows, err := s.pool.Query(ctx, s.q.claimUnknown, s.replan, req.Now, req.UpdatedBefore, principal, req.Tools, req.Limit,
		req.Owner, leaseEnd(req.Now.Add(req.Lease)))
	if err != nil {
		return nil, s.wrap("claim unknown", "", err)
	}
	defer rows.Close()
	var out []storekit.ClaimResult
	var corrupt []error
	for rows.Next() {
		var held *time.Time
		var updated time.Time
		rec, err := scanRecord(rows, &held, &updated)
		if errors.Is(err, storekit.ErrCorrupt) {
			corrupt = append(corrupt, err) // its lease lapses; it is reported again next pass
			continue
		}
		if err != nil {
			return nil, s.wrap("claim unknown", "", err)
		}
		res := storekit.ClaimResult{Claimed: true, TookOver: true, Since: updated, Record: *rec}
		if held != nil {
			res.HeldUntil = *held
		}
		if lost && res.HeldUntil.Before(since) {
			res.HeldUntil = since
		}
		out = append(out, res)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("claim unknown", "", err)
	}
	return out, errors.Join(corrupt...)
}

func (s *Store) nextToken(ctx context.Context, q pgx.Tx) (uint64, error) {
	var t int64
	if err := q.QueryRow(ctx, s.q.nextToken).Scan(&t); err != nil {
		return 0, err
	}
	return uint64(t), nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *Store) get(ctx context.Context, q querier, key string, lock bool) (*storekit.Record, error) {
	sql := s.q.get
	if lock {
		sql = s.q.getForUpdate
	}
	rec, err := scanRecord(q.QueryRow(ctx, sql, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: %s: %w", key, storekit.ErrNotFound)
	}
	if err != nil {
		return nil, s.wrap("read", key, err)
	}
	return rec, nil
}

// put writes every column of r's row, which exists.
func (s *Store) put(ctx context.Context, tx pgx.Tx, r *storekit.Record) error {
	args := recordArgs(r)
	if args == nil {
		return fmt.Errorf("pgstore: %s: its resolution cannot be encoded: %w", r.Key, storekit.ErrInvalidRequest)
	}
	_, err := tx.Exec(ctx, s.q.update, args...)
	return err
}

// recordArgs returns r's columns, in the order of written (expires: when
// r may go, Record.SweepAt; lifetime: its Expires); nil if its resolution
// cannot be encoded.
func recordArgs(r *storekit.Record) []any {
	res, err := encodeResolution(r.Resolution)
	if err != nil {
		return nil
	}
	lifetimeAt := nullTime(r.Updated)
	if r.Expires.IsZero() {
		lifetimeAt = nil
	}
	return []any{r.Key, r.Tool, int16(r.State), r.Principal[:], r.Fingerprint[:], r.Owner, int64(r.Token),
		nullTime(leaseEnd(r.LeaseExpiry)), int32(r.Attempts), r.Outcome, r.Created, r.Updated, nullTime(r.SweepAt()),
		r.RetryApproved, res, r.Session[:], r.TakenOver, r.Label,
		nullDigest(r.FenceScope), r.Replaces, r.ReplacedBy, nullTime(r.NoticeUntil), int64(r.Definition), r.Input, r.StandsFor,
		nullTime(r.Expires), lifetimeAt}
}

// nullDigest is a digest column's value: NULL for the zero digest.
func nullDigest(d storekit.Digest) []byte {
	if d == (storekit.Digest{}) {
		return nil
	}
	return d[:]
}

// collect reads listed records. A row it cannot read is skipped and
// reported (an error wrapping storekit.ErrCorrupt, with the readable
// records), never a reason to stop.
func (s *Store) collect(rows pgx.Rows) ([]storekit.Record, error) {
	defer rows.Close()
	var out []storekit.Record
	var corrupt []error
	for rows.Next() {
		rec, err := scanRecord(rows)
		if errors.Is(err, storekit.ErrCorrupt) {
			corrupt = append(corrupt, err)
			continue
		}
		if err != nil {
			return nil, s.wrap("list", "", err)
		}
		out = append(out, *rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("list", "", err)
	}
	return out, errors.Join(corrupt...)
}

// wrap adds context to a database error, keeping context errors findable.
func (s *Store) wrap(op, key string, err error) error {
	if errors.Is(err, storekit.ErrCorrupt) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pgstore: %s %s: %w", op, key, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("pgstore: %s %s: the schema %q is missing its tables (was it dropped?): %w", op, key, s.schema, err)
	}
	if errors.As(err, &pgErr) && pgErr.Code == insufficientPrivilege {
		return fmt.Errorf("pgstore: %s %s: %w: the database role lacks a right this needs; docs/stores.md lists the grants each role needs", op, strings.TrimSpace(key), err)
	}
	if errors.As(err, &pgErr) && pgErr.Code == "25006" { // read_only_sql_transaction
		return fmt.Errorf("pgstore: %s %s: %w: the store was opened read-only", op, strings.TrimSpace(key), err)
	}
	return fmt.Errorf("pgstore: %s %s: %w", op, strings.TrimSpace(key), err)
}

type rowScanner interface{ Scan(dest ...any) error }

// scanRecord reads the columns of a record, then into extra, if any.
func scanRecord(row rowScanner, extra ...any) (*storekit.Record, error) {
	var (
		r                storekit.Record
		state            int16
		principal, fp    []byte
		session          []byte
		token            int64
		lease, expires   *time.Time
		resolution       []byte
		created, updated time.Time
		attempts         int32
		owner, tool, key string
		outcome          []byte
		retryApproved    bool
		takenOver        bool
		label            string
		fenceScope       []byte
		replaces         string
		replacedBy       string
		noticeUntil      *time.Time
		definition       int64
		input            []byte
		standsFor        string
	)
	dest := append([]any{&key, &tool, &state, &principal, &fp, &owner, &token, &lease, &attempts, &outcome,
		&created, &updated, &expires, &retryApproved, &resolution, &session, &takenOver, &label,
		&fenceScope, &replaces, &replacedBy, &noticeUntil, &definition, &input, &standsFor}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	r = storekit.Record{
		Key: key, Tool: tool, State: storekit.State(state), Owner: owner, Token: uint64(token),
		Attempts: int(attempts), Outcome: outcome, Created: created, Updated: updated, RetryApproved: retryApproved,
		TakenOver: takenOver, Label: label, Replaces: replaces, ReplacedBy: replacedBy, Definition: uint64(definition), Input: input,
		StandsFor: standsFor,
	}
	if !r.State.Valid() || len(principal) != len(r.Principal) || len(fp) != len(r.Fingerprint) {
		return nil, &storekit.CorruptRecordError{Key: key, Err: fmt.Errorf("state %d and digests of %d and %d bytes", state, len(principal), len(fp))}
	}
	copy(r.Principal[:], principal)
	copy(r.Fingerprint[:], fp)
	switch len(session) {
	case 0: // a record of an older version
	case len(r.Session):
		copy(r.Session[:], session)
	default:
		return nil, &storekit.CorruptRecordError{Key: key, Err: fmt.Errorf("a session digest of %d bytes", len(session))}
	}
	switch len(fenceScope) {
	case 0:
	case len(r.FenceScope):
		copy(r.FenceScope[:], fenceScope)
	default:
		return nil, &storekit.CorruptRecordError{Key: key, Err: fmt.Errorf("a fence scope of %d bytes", len(fenceScope))}
	}
	if noticeUntil != nil {
		r.NoticeUntil = *noticeUntil
	}
	if lease != nil {
		r.LeaseExpiry = *lease
	}
	if expires != nil {
		r.Expires = *expires
	}
	if len(resolution) > 0 {
		var res storekit.Resolution
		if err := json.Unmarshal(resolution, &res); err != nil {
			return nil, &storekit.CorruptRecordError{Key: key, Err: fmt.Errorf("resolution: %w", err)}
		}
		r.Resolution = &res
	}
	return &r, nil
}

// encodeResolution is r as the value of the resolution column: JSON, which
// pgx sends as such in every query mode (a []byte would go as bytea's text
// where the statement is not described: QueryExecModeExec, the simple
// protocol).
func encodeResolution(r *storekit.Resolution) (json.RawMessage, error) {
	if r == nil {
		return nil, nil
	}
	return json.Marshal(r)
}

// leaseEnd rounds a lease's end up to PostgreSQL's microsecond, which the
// callers' times (nanoseconds, truncated when sent) are compared with: a
// lease may end up to a microsecond late here, never early.
func leaseEnd(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	if r := t.Truncate(time.Microsecond); r.Before(t) {
		return r.Add(time.Microsecond)
	}
	return t
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
