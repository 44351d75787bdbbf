package pgstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// The batches of the group commit (groupcommit.go): claims of new keys,
// written by one multi-row INSERT … ON CONFLICT DO NOTHING RETURNING, and
// outcomes, by one multi-row fenced UPDATE … FROM unnest(…) RETURNING. A
// row the statement does not return was not written: a claim whose key
// exists or whose slot is held (the statement cannot say which; the caller
// goes on to the locked path, as a lone claim does), an outcome whose
// token no longer holds its record (ErrFenced).
//
// A pipelined pgx.Batch of the single statements in one implicit
// transaction writes the same in one round trip and one commit as well;
// it is kept for the benchmark that chose between the two (BenchmarkGroupCommit),
// and the tests run both.

// claimBatch is a claim of a new key in a group commit; its answer is the
// token of the record it inserted, 0 if it inserted none.
type claimBatch = gathered[storekit.ClaimRequest, int64]

// batchCounts counts the batches of two or more writes, and their writes.
type batchCounts struct {
	claimBatches, claims, outcomeBatches, outcomes atomic.Int64
}

// GroupCommitStats counts what the store's group commit shared since Open:
// the batches of two or more writes, and the writes in them. Writes made
// alone are not counted.
type GroupCommitStats struct {
	ClaimBatches, Claims     int64 // batches of claims of new keys, and their claims
	OutcomeBatches, Outcomes int64 // batches of outcomes, and their outcomes
}

// GroupCommitStats returns what the store's group commit has shared so
// far: ClaimsPerBatch = Claims/ClaimBatches says how many claims a commit
// carried under load. It is safe for concurrent use.
func (s *Store) GroupCommitStats() GroupCommitStats {
	b := &s.batched
	return GroupCommitStats{ClaimBatches: b.claimBatches.Load(), Claims: b.claims.Load(),
		OutcomeBatches: b.outcomeBatches.Load(), Outcomes: b.outcomes.Load()}
}

// outcome is the fenced UPDATE of one Finish.
type outcome struct {
	key           string
	token         int64
	state         int16
	attempts      int32
	outcome       []byte
	updated       time.Time
	expires       *time.Time
	retryApproved bool
	resolution    json.RawMessage // encodeResolution
	leaseExpiry   *time.Time
	noticeUntil   *time.Time
}

// outcomeBatch is an outcome in a group commit; its answer is whether it
// was written.
type outcomeBatch = gathered[outcome, bool]

func (s *Store) newGroupCommits() {
	s.claims = &groupCommit[storekit.ClaimRequest, int64]{
		key:  func(r *storekit.ClaimRequest) string { return r.Key },
		lone: s.insertOne,
		many: s.insertMany,
		orphan: func(w *claimBatch) {
			if w.err == nil && w.ans != 0 {
				s.releaseOrphan(w.req.Key, w.ans)
			}
		},
	}
	s.outcomes = &groupCommit[outcome, bool]{
		key:  func(o *outcome) string { return o.key },
		lone: s.finishOne,
		many: s.finishMany,
	}
}

// insertOne claims a new key alone: its token, or 0 if the key exists or
// its slot is held.
func (s *Store) insertOne(ctx context.Context, req *storekit.ClaimRequest) (int64, error) {
	var token int64
	sql, args := s.insertArgs(req, req.Label)
	warning, err := s.onConn(ctx, noFault, func(conn *pgxpool.Conn) error {
		var sync bool
		if err := conn.QueryRow(ctx, sql, args...).Scan(&token, &sync); err != nil {
			return err
		}
		return s.checkDurable(ctx, conn, req.Unkeyed && sync, noFault)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows) || besideRefused(err):
		return 0, nil
	case err != nil:
		return 0, err
	case warning != nil && req.Unkeyed:
		s.giveBack(req.Key, token)
		return 0, notDurable(req.Key, warning)
	}
	return token, nil
}

// besideRefused reports whether err is the insert's refusal of a claim
// that found a record beside its slot (the null key it then writes).
func besideRefused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23502" && pgErr.ColumnName == "key"
}

// finishOne writes an outcome alone: whether its token held the record.
func (s *Store) finishOne(ctx context.Context, o *outcome) (bool, error) {
	tag, err := s.pool.Exec(ctx, s.q.finish, o.key, o.token, o.state, o.attempts, o.outcome,
		o.updated, o.expires, o.retryApproved, o.resolution, o.leaseExpiry, o.noticeUntil)
	return tag.RowsAffected() > 0, err
}

func (s *Store) insertMany(ctx context.Context, batch []*claimBatch) {
	// One order of keys for every batch, so that two processes' batches
	// lock the keys they share in the same order.
	slices.SortFunc(batch, func(a, b *claimBatch) int { return cmp.Compare(a.req.Key, b.req.Key) })
	fault := s.takeFault(&s.claimFault)
	s.batched.claimBatches.Add(1)
	s.batched.claims.Add(int64(len(batch)))
	write := s.insertUnnest
	if s.pipelined {
		write = s.insertPipelined
	}
	tokens, warning, err := write(ctx, batch, fault)
	type pending struct {
		owner string
		token int64
	}
	deliver(s, batch, func(r *storekit.ClaimRequest) string { return r.Key }, tokens, err, s.q.pendingOf,
		func(rows pgx.Rows, p *pending) (string, error) {
			var k string
			return k, rows.Scan(&k, &p.owner, &p.token)
		},
		func(w *claimBatch, p pending) bool {
			w.ans = p.token
			return p.owner == w.req.Owner // it committed: the record is its own
		})
	if warning == nil {
		return
	}
	// The batch committed, but its Unkeyed claims may not have reached
	// the synchronous standby (failover.go).
	for _, w := range batch {
		if w.req.Unkeyed && w.err == nil && !w.alone && w.ans != 0 {
			s.giveBack(w.req.Key, w.ans)
			w.ans, w.err = 0, notDurable(w.req.Key, warning)
		}
	}
}

// deliver answers each writer of a batch from what the batch's write
// returned (answers, err): its own answer when the statement went
// through; alone again when the database refused the statement whole;
// otherwise, the batch's fate unknown, from what lookup (a query of the
// batch's keys, read by scan) finds: committed (as judged by committed,
// which sets its answer) or to be written alone again. A lookup that
// fails too fails every writer closed, as a lone write's lost reply does.
func deliver[Req, Ans, Row any](s *Store, batch []*gathered[Req, Ans], key func(*Req) string, answers map[string]Ans, err error,
	lookup string, scan func(pgx.Rows, *Row) (string, error), committed func(*gathered[Req, Ans], Row) bool) {
	if err == nil {
		for _, w := range batch {
			w.ans = answers[key(&w.req)]
		}
		return
	}
	if refusedWhole(err) {
		for _, w := range batch {
			w.alone = true
		}
		return
	}
	keys := make([]string, len(batch))
	for i, w := range batch {
		keys[i] = key(&w.req)
	}
	rctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	found := map[string]Row{}
	rerr := s.each(rctx, lookup, []any{s.replan, keys}, func(rows pgx.Rows) error {
		var r Row
		k, err := scan(rows, &r)
		found[k] = r
		return err
	})
	for _, w := range batch {
		r, ok := found[key(&w.req)]
		switch {
		case rerr != nil:
			w.err = err
		case ok && committed(w, r):
		default:
			var zero Ans
			w.ans, w.alone = zero, true // not written, or refused: write again alone
		}
	}
}

func (s *Store) insertUnnest(ctx context.Context, batch []*claimBatch, fault fault) (map[string]int64, error, error) {
	n := len(batch)
	keys, tools, owners, labels := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	principals, fps, sessions, scopes := make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
	leases, created := make([]time.Time, n), make([]time.Time, n)
	cuts, needs, definitions, inputs := make([]*time.Time, n), make([]bool, n), make([]int64, n), make([][]byte, n)
	for i, w := range batch {
		r := &w.req
		keys[i], tools[i], owners[i], labels[i] = r.Key, r.Tool, r.Owner, r.Label
		principals[i], fps[i], sessions[i], scopes[i] = r.Principal[:], r.Fingerprint[:], r.Session[:], nullDigest(r.FenceScope)
		leases[i], created[i] = leaseEnd(r.Now.Add(r.Lease)), r.Now
		cuts[i], needs[i] = s.gate(r)
		definitions[i], inputs[i] = int64(r.Definition), r.Input
	}
	if fault == faultRow {
		labels[n/2] = "\x00" // text cannot hold NUL: the database refuses the row
	}
	tokens := make(map[string]int64, n)
	warning, err := s.onConn(ctx, fault, func(conn *pgxpool.Conn) error {
		check := false
		err := queryThroughIndexes(ctx, conn, s.q.insertMany, []any{keys, tools, principals, fps, owners, leases, created, sessions, scopes, labels,
			cuts, needs, definitions, inputs}, func(rows pgx.Rows) error {
			var k string
			var token int64
			var sync bool
			if err := rows.Scan(&k, &token, &sync); err != nil {
				return err
			}
			tokens[k] = token
			check = check || sync
			return nil
		})
		if err != nil {
			return err
		}
		return s.checkDurable(ctx, conn, check && hasUnkeyed(batch), fault)
	})
	return tokens, warning, err
}

// queryThroughIndexes runs the batch statement sql with args on conn right
// after throughIndexes, in one transaction, and calls each on every row it
// returns.
func queryThroughIndexes(ctx context.Context, conn *pgxpool.Conn, sql string, args []any, each func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	b.Queue(throughIndexes)
	b.Queue(sql, args...)
	br := conn.SendBatch(ctx, b)
	err := func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := each(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// hasUnkeyed reports whether a batch has an Unkeyed claim.
func hasUnkeyed(batch []*claimBatch) bool {
	return slices.ContainsFunc(batch, func(w *claimBatch) bool { return w.req.Unkeyed })
}

// undurable is what checkDurable returns, inside onConn's fn, when claims
// that committed under synchronous replication are not known to be
// durable where a failover can go: synchronous replication was turned off
// while their commit waited (stillDurable says so), or the check itself
// failed. Either way the claims committed, and a failover could lose
// them: onConn reports why as the connection's warning, as it does
// PostgreSQL's own (errWaitCancelled), never as the write's error, which
// would tell its callers that nothing was written.
type undurable struct{ why error }

func (u undurable) Error() string { return u.why.Error() }

// checkDurable runs stillDurable on conn when check is set: after the
// commit of Unkeyed claims made under synchronous replication. Unless it
// answers that they are still durable, it returns an undurable.
func (s *Store) checkDurable(ctx context.Context, conn *pgxpool.Conn, check bool, fault fault) error {
	sql := s.q.stillDurable
	if fault == faultCheck {
		check, sql = true, `SELECT 1/0 = 1`
	}
	if !check || s.acceptAsync {
		return nil
	}
	var ok bool
	if err := conn.QueryRow(ctx, sql).Scan(&ok); err != nil {
		return undurable{fmt.Errorf("checking that it is durable after its commit: %w", err)}
	}
	if !ok {
		return undurable{errors.New("synchronous replication was turned off while the commit waited for it")}
	}
	return nil
}

func (s *Store) insertPipelined(ctx context.Context, batch []*claimBatch, fault fault) (map[string]int64, error, error) {
	b := &pgx.Batch{}
	for i, w := range batch {
		r := &w.req
		label := r.Label
		if fault == faultRow && i == len(batch)/2 {
			label = "\x00"
		}
		sql, args := s.insertArgs(r, label)
		b.Queue(sql, args...)
	}
	tokens := make(map[string]int64, len(batch))
	warning, err := s.onConn(ctx, fault, func(conn *pgxpool.Conn) error {
		br := conn.SendBatch(ctx, b)
		var first error
		check := false
		for _, w := range batch {
			var token int64
			var sync bool
			err := br.QueryRow().Scan(&token, &sync)
			switch {
			case err == nil:
				tokens[w.req.Key] = token
				check = check || (sync && w.req.Unkeyed)
			case errors.Is(err, pgx.ErrNoRows):
			case first == nil:
				first = err
			}
		}
		if err := br.Close(); first == nil {
			first = err
		}
		if first != nil {
			return first
		}
		return s.checkDurable(ctx, conn, check, fault)
	})
	return tokens, warning, err
}

func (s *Store) finishMany(ctx context.Context, batch []*outcomeBatch) {
	slices.SortFunc(batch, func(a, b *outcomeBatch) int { return cmp.Compare(a.req.key, b.req.key) })
	fault := s.takeFault(&s.finishFault)
	s.batched.outcomeBatches.Add(1)
	s.batched.outcomes.Add(int64(len(batch)))
	write := s.finishUnnest
	if s.pipelined {
		write = s.finishPipelined
	}
	written, err := write(ctx, batch, fault)
	type row struct {
		token    int64
		state    int16
		attempts int32
		outcome  []byte
	}
	deliver(s, batch, func(o *outcome) string { return o.key }, written, err, s.q.tokensOf,
		func(rows pgx.Rows, r *row) (string, error) {
			var k string
			return k, rows.Scan(&k, &r.token, &r.state, &r.attempts, &r.outcome)
		},
		func(w *outcomeBatch, r row) bool {
			// Only its token's holder ends a pending record under that
			// token: the record holds this outcome under it, written by
			// this batch or by the same outcome before (a Finish asked
			// again). Another outcome under the token was not this one.
			w.ans = r.token == w.req.token && r.state != int16(storekit.Pending) && r.state == w.req.state &&
				r.attempts == w.req.attempts && bytes.Equal(r.outcome, w.req.outcome)
			return w.ans
		})
}

func (s *Store) finishUnnest(ctx context.Context, batch []*outcomeBatch, fault fault) (map[string]bool, error) {
	n := len(batch)
	keys := make([]string, n)
	tokens := make([]int64, n)
	states := make([]int16, n)
	attempts := make([]int32, n)
	outcomes, resolutions := make([][]byte, n), make([]json.RawMessage, n)
	updated := make([]time.Time, n)
	expires, leases, notices := make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	approved := make([]bool, n)
	for i, w := range batch {
		o := &w.req
		keys[i], tokens[i], states[i], attempts[i] = o.key, o.token, o.state, o.attempts
		outcomes[i], resolutions[i], updated[i] = o.outcome, o.resolution, o.updated
		expires[i], leases[i], notices[i], approved[i] = o.expires, o.leaseExpiry, o.noticeUntil, o.retryApproved
	}
	if fault == faultRow {
		resolutions[n/2] = json.RawMessage(`{"note":"\u0000"}`) // jsonb cannot hold NUL: the database refuses the row
	}
	written := make(map[string]bool, n)
	_, err := s.onConn(ctx, fault, func(conn *pgxpool.Conn) error {
		return queryThroughIndexes(ctx, conn, s.q.finishMany, []any{keys, tokens, states, attempts, outcomes, updated, expires, approved, resolutions, leases, notices},
			func(rows pgx.Rows) error {
				var k string
				if err := rows.Scan(&k); err != nil {
					return err
				}
				written[k] = true
				return nil
			})
	})
	return written, err
}

func (s *Store) finishPipelined(ctx context.Context, batch []*outcomeBatch, fault fault) (map[string]bool, error) {
	b := &pgx.Batch{}
	for i, w := range batch {
		o := &w.req
		res := o.resolution
		if fault == faultRow && i == len(batch)/2 {
			res = json.RawMessage(`{"note":"\u0000"}`)
		}
		b.Queue(s.q.finish, o.key, o.token, o.state, o.attempts, o.outcome, o.updated, o.expires, o.retryApproved, res, o.leaseExpiry, o.noticeUntil)
	}
	written := make(map[string]bool, len(batch))
	_, err := s.onConn(ctx, fault, func(conn *pgxpool.Conn) error {
		br := conn.SendBatch(ctx, b)
		var first error
		for _, w := range batch {
			tag, err := br.Exec()
			if err != nil && first == nil {
				first = err
			}
			written[w.req.key] = err == nil && tag.RowsAffected() > 0
		}
		if err := br.Close(); first == nil {
			first = err
		}
		return first
	})
	return written, err
}

// refusedWhole reports whether err says the database refused a batch's
// statement, so that nothing of it was written: an ERROR ends its own
// transaction (a FATAL, a lost connection or an unread reply may come
// after the commit), or the statement never left.
func refusedWhole(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Severity == "ERROR"
	}
	return pgconn.SafeToRetry(err)
}

// onConn runs fn on a connection of the pool, with the failpoint fault.
// Its warning says why claims fn committed may not be durable where a
// failover can go: the connection received a warning meanwhile (when the
// pool counts them: failover.go), or fn returned an undurable.
func (s *Store) onConn(ctx context.Context, fault fault, fn func(*pgxpool.Conn) error) (warning, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if fault == faultLostBeforeCommit {
		conn.Conn().Close(ctx)
	}
	pc := conn.Conn().PgConn()
	before := warnings(pc)
	err = fn(conn)
	if fault == faultLostAfterCommit && err == nil {
		conn.Conn().Close(ctx)
		return nil, fmt.Errorf("pgstore failpoint: the connection was lost before the batch's reply was read: %w", io.ErrUnexpectedEOF)
	}
	var u undurable
	if errors.As(err, &u) {
		warning, err = u.why, nil // what fn wrote committed
	}
	if warnings(pc) > before {
		warning = errWaitCancelled
	}
	return warning, err
}

// each runs a query and calls fn on each row.
func (s *Store) each(ctx context.Context, sql string, args []any, fn func(pgx.Rows) error) error {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// releaseOrphan gives back a claim granted in a batch after its caller
// gave up: nothing ran under it. If it cannot, its lease lapses as any
// holder's does.
func (s *Store) releaseOrphan(key string, token int64) {
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	s.pool.Exec(ctx, s.q.release, key, token)
}

// fault is a failpoint of the group commit, for tests (export_test.go):
// what goes wrong with the next batch of two or more writes of a kind.
type fault int32

const (
	noFault fault = iota
	// faultRow: the database refuses one row of the batch, and so the
	// whole statement.
	faultRow
	// faultLostBeforeCommit: the connection is closed before the batch is
	// sent.
	faultLostBeforeCommit
	// faultLostAfterCommit: the batch commits, and the connection is
	// closed before its reply is read.
	faultLostAfterCommit
	// faultCheck: the batch of claims commits, and the check after its
	// commit that its Unkeyed claims are durable (checkDurable), run as
	// under synchronous replication, fails with an ERROR.
	faultCheck
)

func (s *Store) takeFault(f *atomic.Int32) fault { return fault(f.Swap(int32(noFault))) }
