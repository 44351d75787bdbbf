package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
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
	// session's slot. The fence no longer lists a scope's open records, so
	// records_scope goes: a claim writes one index entry fewer, and a
	// listing of one tool and principal reads the open records' index.
	// records_beside finds the records beside their session's slot
	// (storekit.Record.Beside: claimed under FenceOff, a principal's fence,
	// or an earlier version, and pending, unknown or within a notice),
	// which hold back a claim fenced by session; records of the default
	// fence never enter it. The look takes the first by key, so that the
	// index's order makes it the plan whatever the statistics say.
	`ALTER TABLE {s}.records ADD COLUMN fence_scope bytea;
	ALTER TABLE {s}.records ADD COLUMN replaces text NOT NULL DEFAULT '';
	ALTER TABLE {s}.records ADD COLUMN replaced_by text NOT NULL DEFAULT '';
	ALTER TABLE {s}.records ADD COLUMN notice_until timestamptz;
	UPDATE {s}.records SET fence_scope = session WHERE key IN (
		SELECT DISTINCT ON (tool, session) key FROM {s}.records
		WHERE (state = 1 OR state = 4) AND session <> ''::bytea ORDER BY tool, session, updated DESC);
	CREATE UNIQUE INDEX records_slot ON {s}.records (tool, fence_scope)
		WHERE fence_scope IS NOT NULL AND (state = 1 OR state = 4 OR notice_until IS NOT NULL);
	CREATE INDEX records_beside ON {s}.records (tool, session, key)
		WHERE (state = 1 OR state = 4 OR notice_until IS NOT NULL) AND fence_scope IS DISTINCT FROM session;
	DROP INDEX {s}.records_scope;`,
	// 5: records_open goes. Every open record is found through the two
	// indexes the fence keeps: one with a fence scope holds its slot
	// (records_slot), one without (claimed under FenceOff, or by a
	// version before slots) is beside its session's slot (records_beside).
	// A claim and its outcome each keep one index fewer (open, below).
	// The two are built again with the predicates of storekit's HoldsSlot
	// and Beside word for word: a notice is kept by a succeeded record
	// only. Besides saying exactly what the store decides by, that lets
	// the planner see them small without statistics (after a restore or
	// pg_upgrade, before ANALYZE): "notice_until IS NOT NULL" alone is
	// taken to hold for nearly every row, and a reading of the open
	// records by the two indexes was planned as a read of the table.
	`DROP INDEX IF EXISTS {s}.records_open;
	CREATE UNIQUE INDEX records_slot_5 ON {s}.records (tool, fence_scope)
		WHERE fence_scope IS NOT NULL AND (state = 1 OR state = 4 OR (state = 2 AND notice_until IS NOT NULL));
	DROP INDEX {s}.records_slot;
	ALTER INDEX {s}.records_slot_5 RENAME TO records_slot;
	CREATE INDEX records_beside_5 ON {s}.records (tool, session, key)
		WHERE (state = 1 OR state = 4 OR (state = 2 AND notice_until IS NOT NULL)) AND fence_scope IS DISTINCT FROM session;
	DROP INDEX {s}.records_beside;
	ALTER INDEX {s}.records_beside_5 RENAME TO records_beside;`,
	// 6: records_open returns, on the open records alone, and the
	// listings, the count of unknown actions and the sweeper's takeover
	// read it instead of records_slot and records_beside. Those two also
	// hold each succeeded record that was given a notice, for as long as
	// the record lives: an index cannot know when a notice ends. In the
	// soak they held thousands, every takeover of four unknown records
	// read all of them, and the takeovers came to take half of the
	// server's time by the third minute. A claim writes one index entry
	// more for it.
	`CREATE INDEX records_open ON {s}.records (key) WHERE state = 1 OR (state = 4 AND NOT retry_approved);`,
	// 7: the timeline the store works on (failover.go). A promoted standby
	// starts a new timeline, and may not have received the last writes
	// of the primary it replaces: every statement that hands out a token
	// or makes a new claim checks that the server's timeline is the one
	// recorded here, and a store that finds another records it (and
	// when it noticed it) with notice_timeline, which moves the token
	// sequence past every token the old timeline could have handed out.
	// Any role may read the timeline; the function, which only the
	// owner of the sequence could write, runs with its owner's rights
	// and does nothing but record the server's own timeline.
	`CREATE TABLE {s}.timeline (
		one      boolean PRIMARY KEY DEFAULT true CHECK (one),
		timeline bigint NOT NULL,
		noticed  timestamptz NOT NULL
	);
	INSERT INTO {s}.timeline (timeline, noticed) VALUES (` + serverTimeline + `, '-infinity');
	GRANT SELECT ON {s}.timeline TO PUBLIC;
	CREATE FUNCTION {s}.notice_timeline(at timestamptz) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp AS $$
	BEGIN
		INSERT INTO {s}.timeline AS t (one, timeline, noticed) VALUES (true, ` + serverTimeline + `, at)
			ON CONFLICT (one) DO UPDATE SET timeline = excluded.timeline, noticed = excluded.noticed
			WHERE t.timeline <> excluded.timeline;
		IF FOUND THEN
			PERFORM setval('{s}.tokens', (SELECT last_value FROM {s}.tokens) + ` + tokenJump + `);
		END IF;
	END $$;`,
	// 8: the definition of the tool each action was claimed under
	// (storekit.Record.Definition): 0 for the records before it. Adding a
	// column with a constant default rewrites nothing.
	`ALTER TABLE {s}.records ADD COLUMN definition bigint NOT NULL DEFAULT 0;`,
	// 9: the input an action keeps while it may be unknown
	// (storekit.Record.Input, agenttool.Options.KeepInput), as the tool's
	// codec encoded it; NULL for every other record.
	`ALTER TABLE {s}.records ADD COLUMN input bytea;`,
	// 10: the open records again, by principal: a listing of one
	// principal's open records (of one tool, or of all) reads theirs
	// alone, in key order, rather than walking records_open past every
	// other tenant's. A claim writes one index entry more for it.
	`CREATE INDEX records_open_scope ON {s}.records (principal, key) WHERE state = 1 OR (state = 4 AND NOT retry_approved);`,
	// 11: records_beside by principal too: a claim fenced by principal
	// is held back by the records of its tool and principal that hold no
	// slot (storekit.ClaimRequest.Beside: claimed under FenceOff, by a
	// version before slots, or settled applied aside from their scope),
	// in every session of the principal; a claim fenced by session reads
	// its session's entries as before, one principal in.
	`CREATE INDEX records_beside_11 ON {s}.records (tool, principal, session, key)
		WHERE (state = 1 OR state = 4 OR (state = 2 AND notice_until IS NOT NULL)) AND fence_scope IS DISTINCT FROM session;
	DROP INDEX {s}.records_beside;
	ALTER INDEX {s}.records_beside_11 RENAME TO records_beside;`,
	// 12: the action a marked record stands in for
	// (storekit.Record.StandsFor): '' for every other record, and for
	// records marked before it. Adding a column with a constant default
	// rewrites nothing.
	`ALTER TABLE {s}.records ADD COLUMN stands_for text NOT NULL DEFAULT '';`,
	// 13: records_beside holds the records closed as replaced that keep
	// a mark too (state 3 with a notice: storekit.Record.Beside), which
	// hold back their own conversation's model under a principal's fence.
	// The index is built again, as migration 11 built it.
	`CREATE INDEX records_beside_13 ON {s}.records (tool, principal, session, key)
		WHERE (state = 1 OR state = 4 OR (state = 2 AND notice_until IS NOT NULL) OR (state = 3 AND notice_until IS NOT NULL)) AND fence_scope IS DISTINCT FROM session;
	DROP INDEX {s}.records_beside;
	ALTER INDEX {s}.records_beside_13 RENAME TO records_beside;`,
	// 14: a record's own lifetime (storekit.Record.Expires), apart from
	// when it may go (expires: storekit.Record.SweepAt, the later of its
	// lifetime and its notice or mark). Until now a mark moved expires to
	// its end, which is in 2262 until its model is told, and telling
	// never moved it back. expires keeps its meaning, so that a replica
	// of the version before, working on the migrated schema until it is
	// replaced, sweeps and claims as it did: a record it writes keeps
	// the lifetime it gives it in expires, and lifetime_at, the updated
	// it was written with, tells a lifetime that such a write left behind
	// (reads: expiresRead). A record a mark kept until 2262 had its own
	// lifetime overwritten: it is given the longest lifetime of its
	// tool's settled records (none such: it stays as it is).
	`ALTER TABLE {s}.records ADD COLUMN lifetime timestamptz;
	ALTER TABLE {s}.records ADD COLUMN lifetime_at timestamptz;
	DO $$ BEGIN
	IF EXISTS (SELECT FROM {s}.records WHERE expires = ` + untilTold + `) THEN
		UPDATE {s}.records r SET lifetime = r.updated + t.life, lifetime_at = r.updated, expires = GREATEST(r.updated + t.life, r.notice_until)
			FROM (SELECT tool, max(expires - updated) AS life FROM {s}.records
				WHERE state IN (2, 3) AND notice_until IS NULL AND expires IS NOT NULL AND expires <> ` + untilTold + ` GROUP BY tool) t
			WHERE r.tool = t.tool AND r.expires = ` + untilTold + `;
	END IF;
	END $$;`,
	// 15: records_beside holds every record closed as replaced that keeps
	// a mark, whatever its fence (storekit.Record.Beside): under the
	// default fence, by session, the claim held back and told by one mark
	// of a conversation tells the others about that action with it, and
	// ends them. The index is built again, as migration 13 built it.
	`CREATE INDEX records_beside_15 ON {s}.records (tool, principal, session, key)
		WHERE ((state = 3 AND notice_until IS NOT NULL) OR (state = 1 OR state = 4 OR (state = 2 AND notice_until IS NOT NULL)) AND fence_scope IS DISTINCT FROM session);
	DROP INDEX {s}.records_beside;
	ALTER INDEX {s}.records_beside_15 RENAME TO records_beside;`,
	// 16: the table is never planned for as a page or none. The planner
	// takes a table never analysed for ten pages at least, and reads a
	// row by its key through the primary key; analysed at a few dozen
	// rows, one page, it reads the table instead, and a connection keeps
	// that plan of each statement it prepared — the insert, the outcome,
	// the read of one key — until the table is next analysed, a naptime
	// or more, while it may grow by thousands of rows a second. So
	// autovacuum first vacuums or analyses it once a thousand rows
	// changed (firstAnalysis), not fifty: from a few hundred rows on, the
	// primary key is the cheaper way. And vacuum keeps the pages of a
	// table the sweep emptied (vacuum_truncate off), which new records
	// fill again, rather than give them back to the filesystem under a
	// lock that holds every claim: the planner goes on counting them.
	`ALTER TABLE {s}.records SET (autovacuum_vacuum_threshold = ` + strconv.Itoa(firstAnalysis) + `,
		autovacuum_vacuum_insert_threshold = ` + strconv.Itoa(firstAnalysis) + `, autovacuum_analyze_threshold = ` + strconv.Itoa(firstAnalysis) + `,
		vacuum_truncate = false)`,
}

// firstAnalysis is how many rows of the records table change before
// autovacuum may first vacuum or analyse it (migration 16): an action
// changes its row twice (its claim and its outcome), so the table then
// holds five hundred records or more.
const firstAnalysis = 1000

// untilTold is storekit.UntilTold, as an SQL literal.
var untilTold = "'" + storekit.UntilTold.Format("2006-01-02 15:04:05Z07:00") + "'::timestamptz"

// expiresRead is how a record's Expires is read (p prefixes the columns):
// its lifetime, if the record's last write wrote it (lifetime_at, the
// updated it was written with); otherwise expires, which a replica of the
// version before migration 14 wrote last, keeping the record no shorter.
func expiresRead(p string) string {
	return `CASE WHEN ` + p + `lifetime_at = ` + p + `updated THEN ` + p + `lifetime ELSE ` + p + `expires END`
}

// selected is columns as a SELECT reads them, prefixed by p.
func selected(p string) string {
	return strings.Replace(prefixed(p, columns), p+"expires,", expiresRead(p)+",", 1)
}

// written is the columns a write of the whole row writes: columns, then
// the record's lifetime and the updated it was written with.
const written = columns + `, lifetime, lifetime_at`

const columns = `key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, outcome, created, updated, expires, retry_approved, resolution, session, taken_over, label, fence_scope, replaces, replaced_by, notice_until, definition, input, stands_for`

// holdsSlot is the SQL form of storekit.Record.HoldsSlot, the predicate of
// the records_slot index.
const holdsSlot = `fence_scope IS NOT NULL AND (state = 1 OR state = 4 OR (state = 2 AND notice_until IS NOT NULL))`

// beside is the SQL form of storekit.Record.Beside, the predicate of the
// records_beside index, for the records aliased b.
const beside = `((b.state = 3 AND b.notice_until IS NOT NULL) OR (b.state = 1 OR b.state = 4 OR (b.state = 2 AND b.notice_until IS NOT NULL)) AND b.fence_scope IS DISTINCT FROM b.session)`

// holdsNoSlotOrMarked is the part of storekit.ClaimRequest.Beside for a
// claim fenced by principal, for the records aliased b found beside: one
// that holds no slot, or one closed as replaced that keeps a mark.
const holdsNoSlotOrMarked = `(b.fence_scope IS NULL OR b.state = 3)`

// awaiting is the SQL form of storekit.Record.AwaitsReconciliation at $1.
const awaiting = `((state = 4 AND NOT retry_approved) OR (state = 1 AND lease_expiry <= $1))`

// open holds every pending record and every unknown one not approved for
// another attempt: the predicate of the records_open index, word for word,
// so that the planner reads that index rather than the table; a query ANDs
// it with what it asks (awaiting).
const open = `(state = 1 OR (state = 4 AND NOT retry_approved))`

// throughIndexes, run right before a statement of the group commit
// (insertMany, finishMany) in the same transaction, leaves its plan one
// way to the table: through an index, with a condition drawn from each row
// of the batch. Scans of the whole table, plain index scans (which may
// read a whole index, with no condition) and hash and merge joins are
// ruled out, so that a batch of outcomes finds each row by a bitmap scan
// of the primary key with its key as the condition, in a nested loop over
// the batch, and a batch of claims looks beside each claim's slot by a
// bitmap scan of records_beside with its tool, principal and session. The
// plan then no longer depends on what the planner knows of the table —
// planned while the table was new, or analysed while small, a batch read
// the whole table, every open record or the whole primary key, and its
// connection kept that plan until the server next analysed the table —
// and so it is planned once per connection and kept (a generic plan)
// rather than for each batch, which cost PostgreSQL more than the write.
// What is ruled out still runs where nothing else can (the one-row
// timeline table is read whole), at a cost the planner counts as huge:
// JIT compilation is off, or it would compile the statement at each run
// (600 ms a batch of claims).
const throughIndexes = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_indexscan', 'off', true),
	set_config('enable_indexonlyscan', 'off', true), set_config('enable_hashjoin', 'off', true),
	set_config('enable_mergejoin', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('jit', 'off', true)`

// replanned returns the mode in which a pool of connections configured as
// cfg runs the statements whose best plan depends on how many rows the
// table holds: each planned when it runs, for the table as it is then. A
// connection keeps the plan of a statement it prepared (mode
// QueryExecModeCacheStatement, pgx's default), and a plan made while the
// table was new and small reads it whole, and would go on reading every
// row each time until the server next analysed the table. (The group
// commit's batches, which run far more often, are planned once instead,
// after throughIndexes.) The other modes plan each statement when it runs
// already. The statements that find one row by its
// key keep the pool's mode. A pool whose description cache is off
// (description_cache_capacity=0) cannot run QueryExecModeCacheDescribe:
// its statements are described at each run instead.
func replanned(cfg *pgx.ConnConfig) pgx.QueryExecMode {
	switch {
	case cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement:
		return cfg.DefaultQueryExecMode
	case cfg.DescriptionCacheCapacity > 0:
		return pgx.QueryExecModeCacheDescribe
	}
	return pgx.QueryExecModeDescribeExec
}

type queries struct {
	insert, insertMany, besideForUpdate, besideOfPrincipalForUpdate, pendingOf, finishMany, tokensOf, insertRecord, get, getForUpdate, occupantForUpdate, slotHolder, update, nextToken, finish, release, restoreOther, ownedForUpdate, renew, sweep, listUnknown, listScope, listPrincipal, claimUnknown, count, countUnknown, raiseTokens string
	environment, noticeTimeline, insertUnkeyed, stillDurable                                                                                                                                                                                                                                                                                string
}

// newQueries builds the statements of a store on schema. What a store
// knows for good — whether it hears warnings, whether it accepts
// asynchronous standbys — is written into the statements rather than
// passed as parameters: a prepared statement whose parameters let the
// planner fold part of it away is planned again at each run.
func newQueries(schema string, hears, acceptAsync bool) queries {
	t := pgx.Identifier{schema, "records"}.Sanitize()
	seq := pgx.Identifier{schema, "tokens"}.Sanitize()
	tl := pgx.Identifier{schema, "timeline"}.Sanitize()
	// onTimeline holds when the server's timeline is the one the store
	// recorded, and, where the time $cut is not null, the store noticed
	// it at or before $cut (failover.go).
	onTimeline := func(cut string) string {
		return `EXISTS (SELECT FROM ` + tl + ` WHERE timeline = ` + serverTimeline + ` AND (` + cut + `::timestamptz IS NULL OR noticed <= ` + cut + `))`
	}
	// noticedBy is onTimeline for the rows of a batch: the timeline is read
	// once per statement (an uncorrelated subquery, an InitPlan), and each
	// row compares its own cut.
	noticedBy := func(cut string) string {
		n := `(SELECT noticed FROM ` + tl + ` WHERE timeline = ` + serverTimeline + `)`
		return `(` + n + ` IS NOT NULL AND (` + cut + ` IS NULL OR ` + n + ` <= ` + cut + `))`
	}
	// durable holds when a claim whose $need is set is durable where a
	// failover can go: the primary waits for a synchronous standby (and
	// the store hears, $hears, when such a wait is cancelled), or no
	// standby is in sight.
	heard := "false"
	if hears {
		heard = "true"
	}
	durable := func(need string) string {
		if acceptAsync {
			return `true`
		}
		return `(NOT ` + need + ` OR (current_setting('synchronous_standby_names') <> '' AND ` + heard + `) OR NOT ` + standbysInSight + `)`
	}
	// besideFound holds when a claim of key, tool, principal, session
	// and fence scope (SQL expressions) finds a record beside its slot
	// (storekit.ClaimRequest.Beside): for a claim fenced by session, one
	// of its tool and session; for one fenced by principal, one of its
	// tool and principal that holds no slot, or that is closed as
	// replaced and keeps a mark. Each look reads
	// records_beside in its order.
	// A record closed as replaced whose mark has ended (its model told)
	// sends the claim to the locked path once, which ends the mark and
	// takes it out of the index (storekit.DecideClaim).
	besideFound := func(key, tool, principal, session, scope string) string {
		return `((` + scope + ` IS NOT NULL AND ` + scope + ` = ` + session + ` AND EXISTS (SELECT FROM ` + t + ` b
				WHERE b.tool = ` + tool + ` AND b.principal = ` + principal + ` AND b.session = ` + session + ` AND ` + beside + `
				AND b.key <> ` + key + ` ORDER BY b.key LIMIT 1))
			OR (` + scope + ` IS NOT NULL AND ` + scope + ` = ` + principal + ` AND EXISTS (SELECT FROM ` + t + ` b
				WHERE b.tool = ` + tool + ` AND b.principal = ` + principal + ` AND ` + holdsNoSlotOrMarked + ` AND ` + beside + `
				AND b.key <> ` + key + ` ORDER BY b.session, b.key LIMIT 1)))`
	}
	insertInto := `INSERT INTO ` + t + ` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated, session, label, fence_scope, definition, input)`
	// insertWhere is insert's statement with gate as its gate.
	insertWhere := func(gate, definition, input string) string {
		return insertInto + `
			VALUES (CASE WHEN ` + besideFound("$1", "$2", "$3::bytea", "$8::bytea", "$9::bytea") + `
				OR NOT (` + syncOn + ` AND ` + gate + `)
				THEN NULL ELSE $1 END, $2, 1, $3, $4, $5, nextval('` + seq + `'), $6, 0, $7, $7, $8, $10, $9, ` + definition + `, ` + input + `)
			ON CONFLICT DO NOTHING RETURNING token, ` + syncNamed
	}
	update := `UPDATE ` + t + ` SET tool = $2, state = $3, principal = $4, fingerprint = $5, owner = $6, token = $7,
		lease_expiry = $8, attempts = $9, outcome = $10, created = $11, updated = $12, expires = $13,
		retry_approved = $14, resolution = $15, session = $16, taken_over = $17, label = $18,
		fence_scope = $19, replaces = $20, replaced_by = $21, notice_until = $22, definition = $23, input = $24, stands_for = $25,
		lifetime = $26, lifetime_at = $27 WHERE key = $1`
	return queries{
		// stillDurable, run on a connection right after a claim committed
		// under synchronous replication, holds if it still is: an
		// operator who empties synchronous_standby_names releases the
		// commits waiting for the standby with no warning, acknowledged on
		// the primary alone.
		stillDurable: `SELECT (current_setting('synchronous_standby_names') <> '' AND ` + heard + `) OR NOT ` + standbysInSight,
		// insert claims a new key: it inserts nothing if the key exists,
		// or if another record holds the slot of $2 and $9 (records_slot).
		// A claim fenced by session ($9 = $8) or by principal ($9 = $3)
		// that finds a record beside its slot (records_beside) writes a
		// null key, which the table refuses (not_null_violation on key: see
		// besideRefused): the claim then decides on the locked path. (The
		// look is in VALUES: as INSERT … SELECT … WHERE, the statement cost
		// a lone call about a quarter more.)
		//
		// The claim is made only where it may be (the gate of
		// failover.go): on the timeline the store recorded; for an
		// Unkeyed claim (insertUnkeyed) also not within the failover
		// window ($11, the latest notice it trusts) and durable where a
		// failover can go. Otherwise it writes the null key too, and the
		// locked path finds out why. Its commit waits as
		// synchronous_commit = on at least (syncOn) whatever the
		// session's setting.
		insert:        insertWhere(onTimeline("NULL"), "$11", "$12::bytea"),
		insertUnkeyed: insertWhere(onTimeline("$11")+` AND `+durable("true"), "$12", "$13::bytea"),
		// insertMany is insert for many keys at once (group commit): it
		// returns the keys it inserted, and their tokens. It runs after
		// throughIndexes, in one transaction.
		insertMany: `INSERT INTO ` + t + ` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated, session, label, fence_scope, definition, input)
			SELECT v.key, v.tool, 1, v.principal, v.fingerprint, v.owner, nextval('` + seq + `'), v.lease_expiry, 0, v.created, v.created, v.session, v.label, v.fence_scope, v.definition, v.input
			FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::bytea[], $9::bytea[], $10::text[],
				$11::timestamptz[], $12::bool[], $13::int8[], $14::bytea[])
				AS v(key, tool, principal, fingerprint, owner, lease_expiry, created, session, fence_scope, label, cut, need, definition, input)
			WHERE NOT ` + besideFound("v.key", "v.tool", "v.principal", "v.session", "v.fence_scope") + `
				AND (SELECT ` + syncOn + `) AND ` + noticedBy("v.cut") + ` AND (NOT v.need OR (SELECT ` + durable("true") + `))
			ON CONFLICT DO NOTHING RETURNING key, token, ` + syncNamed,
		// besideForUpdate finds the records of tool $1, principal $2 and
		// session $3 beside its session's slot, other than $4.
		besideForUpdate: `SELECT ` + selected("") + ` FROM ` + t + ` b WHERE b.tool = $1 AND b.principal = $2 AND b.session = $3 AND ` + beside + ` AND b.key <> $4
			ORDER BY b.key FOR UPDATE`,
		// besideOfPrincipalForUpdate finds the records of tool $1 and
		// principal $2 beside their session's slot that hold no slot, or
		// are closed as replaced and keep a mark, other than $3.
		besideOfPrincipalForUpdate: `SELECT ` + selected("") + ` FROM ` + t + ` b WHERE b.tool = $1 AND b.principal = $2 AND ` + holdsNoSlotOrMarked + ` AND ` + beside + ` AND b.key <> $3
			ORDER BY b.session, b.key FOR UPDATE`,
		// pendingOf finds what a batch of claims whose reply was lost made.
		pendingOf: `SELECT key, owner, token FROM ` + t + ` WHERE key = ANY($1) AND state = 1`,
		// finishMany is finish for many records at once (group commit): it
		// returns the keys it wrote. Its keys are distinct. An unknown
		// outcome keeps the record's input, and an outcome other than
		// success its mark (storekit.DecideFinish). It runs after
		// throughIndexes, in one transaction, and so finds each row by its
		// key whatever the table holds; "r.state + 0" keeps the planner
		// from reading the open records' partial indexes for it instead.
		finishMany: `UPDATE ` + t + ` AS r SET state = v.state, owner = '', lease_expiry = v.lease_expiry, taken_over = false,
			attempts = v.attempts, outcome = v.outcome, updated = v.updated, retry_approved = v.retry_approved,
			expires = CASE WHEN v.expires IS NOT NULL THEN GREATEST(v.expires, CASE WHEN v.state = 2 THEN v.notice_until ELSE r.notice_until END) END,
			lifetime = v.expires, lifetime_at = v.updated,
			resolution = COALESCE(v.resolution, r.resolution),
			notice_until = CASE WHEN v.state = 2 THEN v.notice_until ELSE r.notice_until END,
			stands_for = CASE WHEN v.state = 2 THEN '' ELSE r.stands_for END,
			input = CASE WHEN v.state = 4 THEN r.input END
			FROM unnest($1::text[], $2::int8[], $3::int2[], $4::int4[], $5::bytea[], $6::timestamptz[], $7::timestamptz[], $8::bool[], $9::jsonb[], $10::timestamptz[], $11::timestamptz[])
				AS v(key, token, state, attempts, outcome, updated, expires, retry_approved, resolution, lease_expiry, notice_until)
			WHERE r.key = v.key AND r.token = v.token AND r.state + 0 = 1 AND (SELECT ` + syncOn + `)
			RETURNING r.key`,
		// tokensOf finds what a batch of outcomes whose reply was lost wrote.
		tokensOf:          `SELECT key, token, state, attempts, outcome FROM ` + t + ` WHERE key = ANY($1)`,
		get:               `SELECT ` + selected("") + ` FROM ` + t + ` WHERE key = $1`,
		getForUpdate:      `SELECT ` + selected("") + ` FROM ` + t + ` WHERE key = $1 FOR UPDATE`,
		occupantForUpdate: `SELECT ` + selected("") + ` FROM ` + t + ` WHERE tool = $1 AND fence_scope = $2 AND ` + holdsSlot + ` FOR UPDATE`,
		slotHolder:        `SELECT key FROM ` + t + ` WHERE tool = $1 AND fence_scope = $2 AND ` + holdsSlot,
		insertRecord: `INSERT INTO ` + t + ` (` + written + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27)
			ON CONFLICT DO NOTHING`,
		update:    update,
		nextToken: `SELECT nextval('` + seq + `')`,
		finish: `UPDATE ` + t + ` SET state = $3, owner = '', lease_expiry = $10, taken_over = false, attempts = $4, outcome = $5, updated = $6,
			expires = CASE WHEN $7::timestamptz IS NOT NULL THEN GREATEST($7, CASE WHEN $3::smallint = 2 THEN $11 ELSE notice_until END) END,
			lifetime = $7, lifetime_at = $6, retry_approved = $8, resolution = COALESCE($9, resolution),
			notice_until = CASE WHEN $3::smallint = 2 THEN $11 ELSE notice_until END,
			stands_for = CASE WHEN $3::smallint = 2 THEN '' ELSE stands_for END,
			input = CASE WHEN $3::smallint = 4 THEN input END
			WHERE key = $1 AND token = $2 AND state = 1 AND ` + syncOn,
		release: `DELETE FROM ` + t + ` WHERE key = $1 AND token = $2 AND state = 1 AND ` + syncOn,
		// restoreOther puts back a record a claim wrote other than its
		// own ($1–$27, as update), if it is as the claim's transaction,
		// $28, wrote it.
		restoreOther: update + ` AND xmin::text::bigint = $28`,
		// ownedForUpdate locks a claim's record while its token holds it,
		// and returns the transaction that wrote it.
		ownedForUpdate: `SELECT xmin::text::bigint FROM ` + t + ` WHERE key = $1 AND token = $2 AND state = 1 FOR UPDATE`,
		renew: `UPDATE ` + t + ` SET lease_expiry = $3, updated = $4
			WHERE key = $1 AND token = $2 AND state = 1 AND ` + syncOn,
		// sweep deletes one step, found by the records_expires index, oldest
		// first; rows another sweeper is deleting are skipped. Its commit
		// does not wait for the disk (synchronous_commit off, in the
		// statement): a delete lost in a crash only leaves an expired
		// record for the next sweep, which a claim treats as absent
		// meanwhile, and a call that commits while a step does would
		// otherwise wait for the step's flush before its own.
		sweep: `DELETE FROM ` + t + ` WHERE (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
			AND key IN (SELECT key FROM ` + t + ` WHERE expires IS NOT NULL AND expires <= $1
			AND (state IN (2, 3) OR (state = 4 AND retry_approved)) ORDER BY expires LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		listUnknown: `SELECT ` + selected("") + ` FROM ` + t + ` WHERE ` + awaiting + ` AND ` + open + `
			AND key > $2 AND ($3::bytea IS NULL OR principal = $3) AND ($5 = '' OR tool = $5)
			AND ($6::bytea IS NULL OR session = $6) ORDER BY key LIMIT $4`,
		// listScope is listUnknown for one tool and principal, from their
		// open records (records_open_scope).
		count: `SELECT tool, state, retry_approved, count(*) FROM ` + t + `
			WHERE $1::bytea IS NULL OR principal = $1 GROUP BY tool, state, retry_approved`,
		// raiseTokens moves the token sequence past the token $1 (the
		// greatest an import brings), if it is not past it yet. The move
		// reads the sequence and then sets it, and a claim's nextval may
		// come in between: it goes tokenJump past what it read, as the
		// move to a new timeline does, so that no token handed out in
		// between is handed out again.
		raiseTokens: `SELECT setval('` + seq + `', GREATEST($1, l + ` + tokenJump + `))
			FROM (SELECT last_value AS l FROM ` + seq + `) AS s WHERE $1::bigint >= l`,
		// countUnknown reads the open records only (records_open).
		countUnknown: `SELECT count(*) FROM ` + t + ` WHERE ` + open + ` AND state = 4 AND NOT retry_approved`,
		listScope: `SELECT ` + selected("") + ` FROM ` + t + ` WHERE principal = $3 AND tool = $5
			AND ($6::bytea IS NULL OR session = $6) AND ` + awaiting + ` AND ` + open + `
			AND key > $2 ORDER BY key LIMIT $4`,
		// listPrincipal is listUnknown for one principal, of every tool,
		// from their open records (records_open_scope): as many as that
		// principal has open are read, and no other's.
		listPrincipal: `SELECT ` + selected("") + ` FROM ` + t + ` WHERE principal = $3
			AND ($5::bytea IS NULL OR session = $5) AND ` + awaiting + ` AND ` + open + `
			AND key > $2 ORDER BY key LIMIT $4`,
		claimUnknown: `UPDATE ` + t + ` r SET state = 1, token = nextval('` + seq + `'), owner = $6, lease_expiry = $7, updated = $1, taken_over = true,
			attempts = CASE WHEN r.state = 1 THEN r.attempts + 1 ELSE r.attempts END
			FROM (SELECT key, lease_expiry AS held_until, updated AS since FROM ` + t + ` WHERE ` + awaiting + ` AND ` + open + ` AND updated < $2
				AND ($3::bytea IS NULL OR principal = $3) AND tool = ANY($4)
				ORDER BY key LIMIT $5 FOR UPDATE SKIP LOCKED) pick
			WHERE r.key = pick.key AND ` + syncOn + `
			RETURNING ` + selected("r.") + `, pick.held_until, pick.since`,
		// environment reads what the store decides durability and the
		// failover window by (failover.go).
		environment: `SELECT current_setting('server_version'), pg_is_in_recovery(), CASE WHEN pg_is_in_recovery() THEN NULL ELSE ` + serverTimeline + ` END,
			t.timeline, t.noticed, current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
			(SELECT count(*) FROM pg_stat_get_wal_senders() w WHERE w.pid NOT IN (` + logicalSenders + `)),
			(SELECT count(*) FROM pg_get_replication_slots() s WHERE s.slot_type = 'physical')
			FROM (SELECT) one LEFT JOIN ` + tl + ` t ON true`,
		noticeTimeline: `SELECT ` + pgx.Identifier{schema, "notice_timeline"}.Sanitize() + `($1)`,
	}
}

func prefixed(p, cols string) string {
	parts := strings.Split(cols, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}

// schemaState is what the database holds of a schema: whether the schema
// and retrysafe's migrations table exist, and the version it is at.
type schemaState struct {
	schema, tables bool
	version        int
}

// Whether a schema and its migrations table exist: quickly, by name
// lookups, which may lag behind a schema another session has just created
// (and need USAGE on the schema, if it exists); or exactly, from the
// catalogs as of the statement, for the migration, which holds the lock.
// The schema's name needs no quoting (schemaName).
const (
	quickExists = `SELECT to_regnamespace($1) IS NOT NULL, to_regclass($1 || '.migrations') IS NOT NULL`
	exactExists = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1),
		EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = 'migrations')`
)

// state reads the schema's state: whether it and its migrations table
// exist (by the query exists), and the version in that table (which needs
// SELECT on it).
func (s *Store) state(ctx context.Context, q querier, exists string) (schemaState, error) {
	var st schemaState
	err := q.QueryRow(ctx, exists, s.schema).Scan(&st.schema, &st.tables)
	if err != nil || !st.tables {
		return st, err
	}
	mig := pgx.Identifier{s.schema, "migrations"}.Sanitize()
	err = q.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+mig).Scan(&st.version)
	return st, err
}

// check refuses a schema this package cannot work with as it is: missing,
// older or newer than its migrations.
func (s *Store) check(st schemaState) error {
	const migrate = "run the migration first (pgstore.Migrate, or retrysafe migrate), as a role that may create and change the schema (docs/stores.md)"
	switch {
	case !st.schema:
		return fmt.Errorf("pgstore: schema %q does not exist in this database (%w): check its name, or %s", s.schema, ErrNoSchema, migrate)
	case !st.tables:
		return fmt.Errorf("pgstore: schema %q has no retrysafe tables (%w): check its name, or %s", s.schema, ErrNoSchema, migrate)
	case st.version < len(migrations):
		return fmt.Errorf("pgstore: schema %q is at version %d, and this version of retrysafe works with version %d (%w): %s",
			s.schema, st.version, len(migrations), ErrSchemaOlder, migrate)
	case st.version > len(migrations):
		return fmt.Errorf("pgstore: schema %q is at version %d, and this version of retrysafe knows versions up to %d (%w): use the version of retrysafe that migrated it, or a later one",
			s.schema, st.version, len(migrations), ErrSchemaNewer)
	}
	return nil
}

// migrate creates the schema and applies missing migrations, and returns
// the version it found and the one it left. Replicas that open at once
// serialise on a transaction-scoped advisory lock. It creates only what is
// missing, so a role that owns an existing schema needs no right on the
// database.
func (s *Store) migrate(ctx context.Context) (from, to int, err error) {
	return s.migrateTo(ctx, len(migrations))
}

// migrateTo is migrate, up to the given version of migrations.
func (s *Store) migrateTo(ctx context.Context, target int) (from, to int, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('retrysafe migrate ' || $1))`, s.schema); err != nil {
			return err
		}
		st, err := s.state(ctx, tx, exactExists)
		if err != nil {
			return err
		}
		from = st.version
		sch := pgx.Identifier{s.schema}.Sanitize()
		mig := pgx.Identifier{s.schema, "migrations"}.Sanitize()
		if !st.schema {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA `+sch); err != nil {
				return err
			}
		}
		if !st.tables {
			if _, err := tx.Exec(ctx, `CREATE TABLE `+mig+` (version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())`); err != nil {
				return err
			}
		}
		if st.version > len(migrations) {
			return s.check(st)
		}
		for v := st.version + 1; v <= target; v++ {
			if _, err := tx.Exec(ctx, strings.ReplaceAll(migrations[v-1], "{s}", sch)); err != nil {
				return fmt.Errorf("migration %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+mig+` (version) VALUES ($1)`, v); err != nil {
				return err
			}
		}
		to = max(target, st.version)
		return nil
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, ErrSchemaNewer):
		return from, from, err
	case errors.As(err, &pgErr) && pgErr.Code == insufficientPrivilege:
		return from, from, fmt.Errorf("pgstore: preparing schema %q: %w: this role may not create or change the schema; run the migration as one that may (pgstore.Migrate, or retrysafe migrate), then open the store with this one (docs/stores.md)", s.schema, err)
	case err != nil:
		return from, from, fmt.Errorf("pgstore: preparing schema %q: %w", s.schema, err)
	}
	return from, to, nil
}
