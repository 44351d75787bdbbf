package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrations are applied in order, each once, under an advisory lock. Never
// edit one that has shipped: add the next.
var migrations = []string{
	// 1: records and the token sequence.
	`CREATE TABLE {s}.records (
		key            text PRIMARY KEY,
		tool           text NOT NULL,
		state          smallint NOT NULL CHECK (state BETWEEN 1 AND 4),
		principal      bytea NOT NULL,
		fingerprint    bytea NOT NULL,
		owner          text NOT NULL DEFAULT '',
		token          bigint NOT NULL,
		lease_expiry   timestamptz,
		attempts       integer NOT NULL DEFAULT 0,
		outcome        bytea,
		created        timestamptz NOT NULL,
		updated        timestamptz NOT NULL,
		expires        timestamptz,
		retry_approved boolean NOT NULL DEFAULT false,
		resolution     jsonb
	);
	CREATE SEQUENCE {s}.tokens;
	CREATE INDEX records_open ON {s}.records (key) WHERE state = 1 OR (state = 4 AND NOT retry_approved);
	CREATE INDEX records_expires ON {s}.records (expires) WHERE expires IS NOT NULL;`,
	// 2: the session digest, and the open records of a tool and principal
	// (the unknown fence) by index, unknown ones apart from pending ones and
	// those by lease expiry, so that live leases are not read.
	`ALTER TABLE {s}.records ADD COLUMN session bytea NOT NULL DEFAULT ''::bytea;
	ALTER TABLE {s}.records ADD COLUMN taken_over boolean NOT NULL DEFAULT false;
	CREATE INDEX records_scope ON {s}.records (tool, principal, state, taken_over, lease_expiry) WHERE state = 1 OR (state = 4 AND NOT retry_approved);`,
	// 3: the label trusted code gives an action, for operators.
	`ALTER TABLE {s}.records ADD COLUMN label text NOT NULL DEFAULT '';`,
	// 4: the slot of the unknown fence (storekit.Record.HoldsSlot): at most
	// one record of a tool and fence scope is pending, unknown (resolved or
	// not) or succeeded with a notice — a unique index, so that two claims
	// of one scope on two replicas cannot both be granted. The replacement
	// relation and the notice. Open records of earlier versions have no
	// fence scope: the most recent of each tool and session takes its
	// session's slot.
	`ALTER TABLE {s}.records ADD COLUMN fence_scope bytea;
	ALTER TABLE {s}.records ADD COLUMN replaces text NOT NULL DEFAULT '';
	ALTER TABLE {s}.records ADD COLUMN replaced_by text NOT NULL DEFAULT '';
	ALTER TABLE {s}.records ADD COLUMN notice_until timestamptz;
	UPDATE {s}.records SET fence_scope = session WHERE key IN (
		SELECT DISTINCT ON (tool, session) key FROM {s}.records
		WHERE (state = 1 OR state = 4) AND session <> ''::bytea ORDER BY tool, session, updated DESC);
	CREATE UNIQUE INDEX records_slot ON {s}.records (tool, fence_scope)
		WHERE fence_scope IS NOT NULL AND (state = 1 OR state = 4 OR notice_until IS NOT NULL);`,
}

const columns = `key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, outcome, created, updated, expires, retry_approved, resolution, session, taken_over, label, fence_scope, replaces, replaced_by, notice_until`

// holdsSlot is the SQL form of storekit.Record.HoldsSlot, the predicate of
// the records_slot index.
const holdsSlot = `fence_scope IS NOT NULL AND (state = 1 OR state = 4 OR notice_until IS NOT NULL)`

// awaiting is the SQL form of storekit.Record.AwaitsReconciliation at $1.
const awaiting = `((state = 4 AND NOT retry_approved) OR (state = 1 AND lease_expiry <= $1))`

// fenced is the unknown fence's question, in SQL: is there a record of a
// tool and principal (and session, unless that parameter is NULL), other
// than a key, that holds the fence at now (storekit.Record.Fences)? Range
// scans of records_scope: unknown records, pending ones taken over from an
// unknown outcome, and other pending ones whose lease has ended; live
// leases are not read. The arguments name the statement's parameters.
func fenced(t, key, tool, principal, now, session string) string {
	scope := `tool = ` + tool + ` AND principal = ` + principal + ` AND key <> ` + key +
		` AND (` + session + `::bytea IS NULL OR session = ` + session + `)`
	return `(EXISTS (SELECT 1 FROM ` + t + ` WHERE ` + scope + ` AND state = 4 AND NOT retry_approved)
		OR EXISTS (SELECT 1 FROM ` + t + ` WHERE ` + scope + ` AND state = 1 AND taken_over)
		OR EXISTS (SELECT 1 FROM ` + t + ` WHERE ` + scope + ` AND state = 1 AND NOT taken_over AND lease_expiry <= ` + now + `))`
}

type queries struct {
	insert, insertRecord, fenced, get, getForUpdate, occupantForUpdate, update, nextToken, finish, release, renew, sweep, listUnknown, listScope, claimUnknown, count, countUnknown, raiseTokens string
}

func newQueries(schema string) queries {
	t := pgx.Identifier{schema, "records"}.Sanitize()
	seq := pgx.Identifier{schema, "tokens"}.Sanitize()
	return queries{
		// insert claims a new key and, in the same statement, answers the
		// fence's question when $10 asks it. It inserts nothing if the key
		// exists, or if another record holds the slot of $2 and $12
		// (records_slot).
		insert: `WITH ins AS (INSERT INTO ` + t + ` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated, session, label, fence_scope)
			VALUES ($1, $2, 1, $3, $4, $5, nextval('` + seq + `'), $6, 0, $7, $7, $8, $11, $12)
			ON CONFLICT DO NOTHING RETURNING token)
			SELECT (SELECT token FROM ins), $10 AND ` + fenced(t, "$1", "$2", "$3", "$7", "$9"),
		fenced:            `SELECT ` + fenced(t, "$1", "$2", "$3", "$4", "$5"),
		get:               `SELECT ` + columns + ` FROM ` + t + ` WHERE key = $1`,
		getForUpdate:      `SELECT ` + columns + ` FROM ` + t + ` WHERE key = $1 FOR UPDATE`,
		occupantForUpdate: `SELECT ` + columns + ` FROM ` + t + ` WHERE tool = $1 AND fence_scope = $2 AND ` + holdsSlot + ` FOR UPDATE`,
		insertRecord: `INSERT INTO ` + t + ` (` + columns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)
			ON CONFLICT DO NOTHING`,
		update: `UPDATE ` + t + ` SET tool = $2, state = $3, principal = $4, fingerprint = $5, owner = $6, token = $7,
			lease_expiry = $8, attempts = $9, outcome = $10, created = $11, updated = $12, expires = $13,
			retry_approved = $14, resolution = $15, session = $16, taken_over = $17, label = $18,
			fence_scope = $19, replaces = $20, replaced_by = $21, notice_until = $22 WHERE key = $1`,
		nextToken: `SELECT nextval('` + seq + `')`,
		finish: `UPDATE ` + t + ` SET state = $3, owner = '', lease_expiry = $10, taken_over = false, attempts = $4, outcome = $5, updated = $6,
			expires = $7, retry_approved = $8, resolution = COALESCE($9, resolution), notice_until = $11
			WHERE key = $1 AND token = $2 AND state = 1`,
		release: `DELETE FROM ` + t + ` WHERE key = $1 AND token = $2 AND state = 1`,
		renew: `UPDATE ` + t + ` SET lease_expiry = $3, updated = $4, taken_over = taken_over OR $5
			WHERE key = $1 AND token = $2 AND state = 1`,
		// sweep deletes one step, found by the records_expires index, oldest
		// first; rows another sweeper is deleting are skipped.
		sweep: `DELETE FROM ` + t + ` WHERE key IN (SELECT key FROM ` + t + ` WHERE expires IS NOT NULL AND expires <= $1
			AND (state IN (2, 3) OR (state = 4 AND retry_approved)) ORDER BY expires LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		listUnknown: `SELECT ` + columns + ` FROM ` + t + ` WHERE ` + awaiting + `
			AND key > $2 AND ($3::bytea IS NULL OR principal = $3) AND ($5 = '' OR tool = $5)
			AND ($6::bytea IS NULL OR session = $6) ORDER BY key LIMIT $4`,
		// listScope is listUnknown for one tool and principal, by the
		// records_scope index.
		count: `SELECT tool, state, retry_approved, count(*) FROM ` + t + `
			WHERE $1::bytea IS NULL OR principal = $1 GROUP BY tool, state, retry_approved`,
		// raiseTokens moves the token sequence past every token in the table.
		raiseTokens: `SELECT setval('` + seq + `', GREATEST((SELECT COALESCE(max(token), 1) FROM ` + t + `), (SELECT last_value FROM ` + seq + `)))`,
		// countUnknown reads the records_open index's records only.
		countUnknown: `SELECT count(*) FROM ` + t + ` WHERE (state = 1 OR (state = 4 AND NOT retry_approved)) AND state = 4`,
		listScope: `SELECT ` + columns + ` FROM ` + t + ` WHERE tool = $5 AND principal = $3
			AND ($6::bytea IS NULL OR session = $6) AND (` + awaiting + ` OR ($7 AND state = 1 AND taken_over))
			AND key > $2 ORDER BY key LIMIT $4`,
		claimUnknown: `UPDATE ` + t + ` r SET state = 1, token = nextval('` + seq + `'), owner = $6, lease_expiry = $7, updated = $1, taken_over = true,
			attempts = CASE WHEN r.state = 1 THEN r.attempts + 1 ELSE r.attempts END
			FROM (SELECT key, lease_expiry AS held_until, updated AS since FROM ` + t + ` WHERE ` + awaiting + ` AND updated < $2
				AND ($3::bytea IS NULL OR principal = $3) AND tool = ANY($4)
				ORDER BY key LIMIT $5 FOR UPDATE SKIP LOCKED) pick
			WHERE r.key = pick.key
			RETURNING ` + prefixed("r.", columns) + `, pick.held_until, pick.since`,
	}
}

func prefixed(p, cols string) string {
	parts := strings.Split(cols, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}

// migrate creates the schema and applies missing migrations. Replicas that
// open at once serialise on a transaction-scoped advisory lock.
func (s *Store) migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('retrysafe migrate ' || $1))`, s.schema); err != nil {
			return err
		}
		sch := pgx.Identifier{s.schema}.Sanitize()
		mig := pgx.Identifier{s.schema, "migrations"}.Sanitize()
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+sch); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+mig+` (version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+mig).Scan(&have); err != nil {
			return err
		}
		if have > len(migrations) {
			return fmt.Errorf("the schema %q is at version %d; this version of retrysafe knows %d: upgrade retrysafe", s.schema, have, len(migrations))
		}
		for v := have + 1; v <= len(migrations); v++ {
			if _, err := tx.Exec(ctx, strings.ReplaceAll(migrations[v-1], "{s}", sch)); err != nil {
				return fmt.Errorf("migration %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+mig+` (version) VALUES ($1)`, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: preparing schema %q: %w", s.schema, err)
	}
	return nil
}
