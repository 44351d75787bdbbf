package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Failover. A primary that replicates asynchronously acknowledges a
// commit before any standby has it: promote a standby after the primary
// died, and the claims and outcomes of the primary's last moments are
// gone. A retry then finds no record and runs again. Three rules keep
// the promise across a failover:
//
//   - Every write of the store commits as synchronous_commit = on at
//     least (syncOn, in the statement itself: a session's or a role's
//     setting, or a pooler's, is never trusted). With
//     synchronous_standby_names set, a commit then returns once a
//     synchronous standby has it.
//   - An Unkeyed claim (at-most-once, reconcilable: only the claim keeps
//     the action from running twice) is made only where it is durable
//     where a failover can go: the primary waits for a synchronous
//     standby, or no standby is in sight (standbysInSight). Otherwise it
//     is refused before the tool acts (storekit.ErrNotDurable), unless
//     Options.AcceptAsyncStandbys accepts the risk. A commit whose wait
//     for its standby was cancelled is kept by PostgreSQL, which only
//     warns: a claim that meets a warning is given back and refused; so
//     is one whose wait was released because synchronous replication was
//     turned off meanwhile (no warning then: after a commit made under
//     synchronous replication, the connection checks stillDurable), or
//     whose check fails: the claim committed, durable or not.
//   - The store records the server's timeline (the timeline table). A
//     promotion starts a new one, which every claim checks in its own
//     statement; the first claim on a new timeline records it with the
//     time it noticed it, and moves the token sequence past every token
//     the old timeline could have handed out (tokenJump). For
//     Options.FailoverWindow after that, an Unkeyed claim that finds no
//     record of its key (or one a lost claim may have moved on from: past
//     its expiry, approved for a retry) does not take it for a new attempt
//     where the record may be one the old primary had and the standby
//     never received (storekit.DecideLost): a reconcilable tool's, which asks
//     its destination first, and, where AcceptAsyncStandbys let claims
//     be made that a failover could lose, an at-most-once tool's too
//     (distrustsAbsence).

const (
	// serverTimeline is the timeline the server writes WAL on, from the
	// name of its current WAL file: any role may read it on a primary
	// (pg_control_checkpoint would show the old timeline until the first
	// checkpoint after a promotion).
	serverTimeline = `('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int::bigint`
	// tokenJump is how far the token sequence moves on a new timeline:
	// past the tokens of 2^32 claims the old primary could have made after
	// the last of its writes the standby received.
	tokenJump = `4294967296`
	// syncOn makes the commit of the statement's transaction wait as
	// synchronous_commit = on does, or remote_apply where the session asks
	// for that: never less, whatever the session's setting (it sets the
	// transaction's only when the session's is less). It is ANDed into a
	// statement's conditions, so that no row is written without it.
	syncOn = `(current_setting('synchronous_commit') IN ('on', 'remote_apply') OR set_config('synchronous_commit', 'on', true) IS NOT NULL)`
	// syncNamed, returned by a claim's statement, says whether its commit
	// waits for a synchronous standby: then the connection checks after
	// the commit that it is still durable (stillDurable).
	syncNamed = `current_setting('synchronous_standby_names') <> ''`
	// syncBegin begins a transaction whose commit waits as syncOn says.
	syncBegin = `BEGIN; SELECT ` + syncOn
	// logicalSenders are the WAL senders that serve logical replication
	// slots: no standby that could be promoted.
	logicalSenders = `SELECT s.active_pid FROM pg_get_replication_slots() s WHERE s.slot_type = 'logical' AND s.active_pid IS NOT NULL`
	// standbysInSight holds when a standby that could be promoted is in
	// sight of the application's role: a WAL sender streaming to a
	// standby (the role sees its process, not its positions), or a
	// physical replication slot, which a standby that is away keeps.
	standbysInSight = `(EXISTS (SELECT FROM pg_stat_get_wal_senders() w WHERE w.pid NOT IN (` + logicalSenders + `))
		OR EXISTS (SELECT FROM pg_get_replication_slots() s WHERE s.slot_type = 'physical'))`
)

// DefaultFailoverWindow is Options.FailoverWindow's default.
const DefaultFailoverWindow = 10 * time.Minute

// Replication is what a store sees of its server's durability and
// replication, with the rights of its role (see [Store.Replication]).
type Replication struct {
	// Version is the server's version (server_version).
	Version string
	// Standby is set when the server is a standby (in recovery): it takes
	// no writes, and the fields of the primary's timeline are zero.
	Standby bool
	// Timeline is the server's timeline; Recorded the one the store last
	// worked on (it records a new one at its next claim), and Noticed when
	// it noticed that it moved there (zero if it never moved, since the
	// migration that made the record).
	Timeline, Recorded int64
	Noticed            time.Time
	// SynchronousCommit is the session's synchronous_commit, before the
	// store raises it for its writes (to on, unless it is remote_apply).
	SynchronousCommit string
	// SynchronousStandbyNames is the primary's synchronous_standby_names:
	// empty, commits do not wait for any standby.
	SynchronousStandbyNames string
	// Standbys is how many WAL senders stream to a standby (the role sees
	// them, not how far behind they are); PhysicalSlots how many physical
	// replication slots the server keeps, for standbys streaming or away.
	Standbys, PhysicalSlots int
	// HearsWarnings reports whether the store hears the warning PostgreSQL
	// sends when a commit's wait for its synchronous standby is cancelled
	// (a pool the store made, or one configured with [ConfigurePool]).
	HearsWarnings bool
	// AcceptAsyncStandbys and FailoverWindow are the store's options.
	AcceptAsyncStandbys bool
	FailoverWindow      time.Duration
}

// UnkeyedClaims returns nil if the store grants the claims of at-most-once
// and reconcilable tools now, or the error it refuses them with, which
// wraps storekit.ErrNotDurable and says what to change.
func (r Replication) UnkeyedClaims() error {
	inSight := r.Standbys > 0 || r.PhysicalSlots > 0
	switch {
	case r.Standby:
		return fmt.Errorf("the server is a standby, which takes no writes: connect to the primary (target_session_attrs=read-write): %w", storekit.ErrNotDurable)
	case r.AcceptAsyncStandbys || !inSight:
		return nil
	case r.SynchronousStandbyNames == "":
		return fmt.Errorf("the primary streams to %s asynchronously (synchronous_standby_names is empty): a failover to one could lose "+
			"this claim, and the action, retried after, could run twice; make replication synchronous (synchronous_standby_names; "+
			"Patroni: synchronous_mode; CloudNativePG: spec.postgresql.synchronous), or accept the risk with pgstore.Options.AcceptAsyncStandbys: %w",
			r.inSight(), storekit.ErrNotDurable)
	case !r.HearsWarnings:
		return fmt.Errorf("the primary waits for a synchronous standby (synchronous_standby_names = %q), and the store cannot hear "+
			"PostgreSQL's warning when such a wait is cancelled on this pool: build the pool's config with pgstore.ConfigurePool, "+
			"or accept the risk with pgstore.Options.AcceptAsyncStandbys: %w", r.SynchronousStandbyNames, storekit.ErrNotDurable)
	}
	return nil
}

// inSight says the standbys in sight in words.
func (r Replication) inSight() string {
	var parts []string
	if r.Standbys > 0 {
		parts = append(parts, plural(r.Standbys, "standby", "standbys"))
	}
	if r.PhysicalSlots > 0 {
		parts = append(parts, plural(r.PhysicalSlots, "physical replication slot", "physical replication slots")+" (kept for a standby)")
	}
	return strings.Join(parts, " and ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// wentBack returns when the store noticed it went back in time, if that
// was within the failover window before now.
func (r Replication) wentBack(now time.Time) (time.Time, bool) {
	if r.FailoverWindow <= 0 || r.Noticed.IsZero() {
		return time.Time{}, false
	}
	return r.Noticed, now.Before(r.Noticed.Add(r.FailoverWindow))
}

// Replication reports what the store sees of its server's durability and
// replication, as `retrysafe doctor` prints it. It only reads.
func (s *Store) Replication(ctx context.Context) (Replication, error) {
	r, _, err := s.environment(ctx, s.pool)
	return r, err
}

// environment reads what the store decides durability and the failover
// window by; moved reports a primary whose timeline is not the one
// recorded.
func (s *Store) environment(ctx context.Context, q querier) (r Replication, moved bool, err error) {
	var (
		server, recorded *int64
		noticed          pgtype.Timestamptz
		standbys, slots  int64
	)
	err = q.QueryRow(ctx, s.q.environment).Scan(&r.Version, &r.Standby, &server, &recorded, &noticed, &r.SynchronousCommit,
		&r.SynchronousStandbyNames, &standbys, &slots)
	if err != nil {
		return r, false, s.wrap("read the server's replication", "", err)
	}
	if server != nil {
		r.Timeline = *server
	}
	if recorded != nil {
		r.Recorded = *recorded
	}
	if noticed.Valid && noticed.InfinityModifier == pgtype.Finite {
		r.Noticed = noticed.Time
	}
	r.Standbys, r.PhysicalSlots = int(standbys), int(slots)
	r.HearsWarnings, r.AcceptAsyncStandbys, r.FailoverWindow = s.hears, s.acceptAsync, s.window
	return r, !r.Standby && (recorded == nil || *recorded != r.Timeline), nil
}

// catchUp reads the environment as of now, and first records the
// server's timeline if it is not the one recorded (noticed at now), which
// moves the token sequence past the old timeline's tokens.
func (s *Store) catchUp(ctx context.Context, now time.Time) (Replication, error) {
	r, moved, err := s.environment(ctx, s.pool)
	if err != nil || !moved {
		return r, err
	}
	if _, err := s.pool.Exec(ctx, s.q.noticeTimeline, now); err != nil {
		return r, s.wrap("record the server's timeline", "", err)
	}
	r, _, err = s.environment(ctx, s.pool)
	return r, err
}

// gate is what a new claim's statement is told (see queries.go): the
// latest notice of a new timeline it trusts (nil: any), and whether it
// must be durable where a failover can go.
func (s *Store) gate(req *storekit.ClaimRequest) (cut *time.Time, need bool) {
	if s.distrustsAbsence(req) {
		c := req.Now.Add(-s.window)
		cut = &c
	}
	return cut, req.Unkeyed && !s.acceptAsync
}

// insertArgs returns the lone claim's statement and its arguments: insert,
// or insertUnkeyed, whose latest trusted notice is never null (a far
// future time where absence is trusted), so that no run of the prepared
// statement plans it apart.
func (s *Store) insertArgs(req *storekit.ClaimRequest, label string) (string, []any) {
	args := []any{req.Key, req.Tool, req.Principal[:], req.Fingerprint[:], req.Owner,
		leaseEnd(req.Now.Add(req.Lease)), req.Now, req.Session[:], nullDigest(req.FenceScope), label}
	if !req.Unkeyed {
		return s.q.insert, append(args, int64(req.Definition), req.Input)
	}
	cut := pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	if c, _ := s.gate(req); c != nil {
		cut = pgtype.Timestamptz{Time: *c, Valid: true}
	}
	return s.q.insertUnkeyed, append(args, cut, int64(req.Definition), req.Input)
}

// distrustsAbsence reports whether req, finding no record of its key
// within the failover window, is decided as a record the store may have
// lost: an Unkeyed claim that may take over (a reconcilable tool, which
// asks its destination first: it costs a check), or any Unkeyed claim
// where AcceptAsyncStandbys let such claims be made without being
// durable, so that a failover may have lost some. Without that option an
// at-most-once claim was made only where it was durable, and a missing
// record means a new action.
func (s *Store) distrustsAbsence(req *storekit.ClaimRequest) bool {
	return s.window > 0 && req.Unkeyed && (req.TakeOver || s.acceptAsync)
}

// warningsKey is where a connection keeps the number of warnings it
// received (see ConfigurePool).
const warningsKey = "retrysafe.warnings"

// ConfigurePool prepares the config of a pool that a store will be given
// (Options.Pool): the store then hears the warning PostgreSQL sends, and
// the success it reports, when a commit's wait for its synchronous
// standby is cancelled — by pg_cancel_backend, or by a client that sends
// cancel requests — and refuses the claim that met it, whose commit a
// failover may have lost. A handler cfg has already is called too. The
// pools Open makes are configured so.
func ConfigurePool(cfg *pgxpool.Config) {
	prev := cfg.ConnConfig.OnNotice
	cfg.ConnConfig.OnNotice = func(c *pgconn.PgConn, n *pgconn.Notice) {
		if c == nil { // hearsWarnings asks
			n.Routine = probeHeard
			return
		}
		if n.SeverityUnlocalized == "WARNING" || (n.SeverityUnlocalized == "" && n.Severity == "WARNING") {
			d := c.CustomData()
			n, _ := d[warningsKey].(int)
			d[warningsKey] = n + 1
		}
		if prev != nil {
			prev(c, n)
		}
	}
}

// warnings returns how many warnings c received.
func warnings(c *pgconn.PgConn) int {
	n, _ := c.CustomData()[warningsKey].(int)
	return n
}

// probeHeard is what ConfigurePool's handler answers hearsWarnings with.
const probeHeard = "retrysafe: counted"

// hearsWarnings reports whether connections of a pool configured as cfg
// count their warnings (ConfigurePool): it calls the pool's handler with
// no connection, which that handler answers in the notice.
func hearsWarnings(cfg *pgx.ConnConfig) (heard bool) {
	if cfg.OnNotice == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			heard = false // a handler of the application's own, which needs a connection
		}
	}()
	n := &pgconn.Notice{Severity: "WARNING", SeverityUnlocalized: "WARNING"}
	cfg.OnNotice(nil, n)
	return n.Routine == probeHeard
}

// notDurable is the error of an Unkeyed claim given back because why: it
// committed, but it may not have reached the synchronous standby.
func notDurable(key string, why error) error {
	return fmt.Errorf("pgstore: claim %s: %v: a failover could lose the claim, so it was given back and the tool did not act: %w",
		key, why, storekit.ErrNotDurable)
}

// errWaitCancelled is why a claim whose commit met PostgreSQL's warning
// is given back.
var errWaitCancelled = errors.New("the commit's wait for the synchronous standby was cancelled (PostgreSQL warned)")

// giveBack undoes a claim of a new key, under token, that is not known to
// be durable: its record goes. If it cannot, the claim's lease lapses, as
// any holder's does.
func (s *Store) giveBack(key string, token int64) {
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	s.pool.Exec(ctx, s.q.release, key, token)
}

// giveBackLocked undoes a claim decided on the locked path (claimLocked),
// under token, that is not known to be durable: the store holds again,
// as the claim found them, every record the claim wrote — its own, prior
// (none: it goes), a record it took over (an unknown outcome, an approved
// retry), and others: records beside its slot, a record it went on in
// the place of, closed as replaced by it (put back alone, the two would
// name each other, a loop of replacements). All or nothing, in one
// transaction, and only while the claim's record is the claim's and each
// other record is as the claim's transaction wrote it (its xmin, the
// claim record's); else nothing is given back, and the claim's lease
// lapses, as any holder's does. The claim's own record goes back first:
// it leaves the slot that a record it took the place of held.
func (s *Store) giveBackLocked(req *storekit.ClaimRequest, token int64, prior *storekit.Record, others []storekit.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: syncBegin}, func(tx pgx.Tx) error {
		if req.FenceScope != (storekit.Digest{}) {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.scopeLock(req.Tool, req.FenceScope)); err != nil {
				return err
			}
		}
		var written int64 // the claim's transaction
		if err := tx.QueryRow(ctx, s.q.ownedForUpdate, req.Key, token).Scan(&written); err != nil {
			return err // not the claim's any more
		}
		if prior == nil {
			if _, err := tx.Exec(ctx, s.q.release, req.Key, token); err != nil {
				return err
			}
		} else if err := s.put(ctx, tx, prior); err != nil {
			return err
		}
		for i := range others {
			args := recordArgs(&others[i])
			if args == nil {
				return errGiveBack
			}
			tag, err := tx.Exec(ctx, s.q.restoreOther, append(args, written)...)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return errGiveBack // changed since the claim
			}
		}
		return nil
	})
}

// errGiveBack rolls back a give-back that cannot put back every record.
var errGiveBack = errors.New("pgstore: the claim cannot be given back whole")
