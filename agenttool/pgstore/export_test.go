package pgstore

import (
	"context"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Versions is the number of migrations this package knows: the version of
// a schema it migrated.
var Versions = len(migrations)

// MigrateTo migrates the schema opts names up to version target only, and
// leaves it as a version of this package with target migrations would.
func MigrateTo(ctx context.Context, opts *Options, target int) (from, to int, err error) {
	s, err := connect(ctx, opts)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	return s.migrateTo(ctx, target)
}

// Failpoints of the group commit.
const (
	FaultRow              = int(faultRow)
	FaultLostBeforeCommit = int(faultLostBeforeCommit)
	FaultLostAfterCommit  = int(faultLostAfterCommit)
	FaultCheck            = int(faultCheck)
)

// GatherClaims makes the next n claims of new keys wait for each other and
// go as one batch, with the failpoint fault (0: none).
func GatherClaims(s *Store, n, fault int) {
	s.claimFault.Store(int32(fault))
	s.claims.gather(n)
}

// GatherOutcomes makes the next n outcomes wait for each other and go as
// one batch, with the failpoint fault (0: none).
func GatherOutcomes(s *Store, n, fault int) {
	s.finishFault.Store(int32(fault))
	s.outcomes.gather(n)
}

// Pipeline makes s write its batches as pipelined single statements
// instead of multi-row ones. Call it before s is used.
func Pipeline(s *Store) { s.pipelined = true }

// Alone makes s write every claim and outcome alone, as it did before its
// group commit. Call it before s is used.
func Alone(s *Store) { s.claims.off, s.outcomes.off = true, true }

// Query is one of the store's statements, with arguments, and the
// statement the store runs before it in the same transaction, if any.
type Query struct {
	SQL    string
	Args   []any
	Before string
}

// OpenRecordQueries are s's statements that read the open records — the
// listings and the count of what awaits reconciliation, and the sweeper's
// takeover — with arguments that ask each for every such record at now, of
// tool (the takeover's statement is an UPDATE: explain it, do not run it).
func OpenRecordQueries(s *Store, now time.Time, tool string, principal []byte) map[string]Query {
	var none []byte
	return map[string]Query{
		"listUnknown":   {SQL: s.q.listUnknown, Args: []any{now, "", none, 100, "", none}},
		"listScope":     {SQL: s.q.listScope, Args: []any{now, "", principal, 100, tool, none}},
		"listPrincipal": {SQL: s.q.listPrincipal, Args: []any{now, "", principal, 100, none}},
		"countUnknown":  {SQL: s.q.countUnknown, Args: nil},
		"claimUnknown":  {SQL: s.q.claimUnknown, Args: []any{now, now, none, []string{tool}, 100, "sweeper", now.Add(time.Minute)}},
	}
}

// Statement returns the text of s's statement of that name (listScope,
// listUnknown, listPrincipal, sweep).
func Statement(s *Store, name string) string {
	switch name {
	case "listScope":
		return s.q.listScope
	case "listUnknown":
		return s.q.listUnknown
	case "listPrincipal":
		return s.q.listPrincipal
	case "sweep":
		return s.q.sweep
	}
	panic("pgstore: no statement " + name)
}

// BatchQueries are s's statements that write a group commit's batch — the
// claims of new keys and the outcomes — with arguments for a batch of keys,
// each of tool, principal and session (an INSERT and an UPDATE: explain
// them, do not run them).
func BatchQueries(s *Store, now time.Time, tool string, principal, session []byte, keys []string) map[string]Query {
	n := len(keys)
	tools, owners, labels := make([]string, n), make([]string, n), make([]string, n)
	digests, outcomes := make([][]byte, n), make([][]byte, n)
	times, later := make([]time.Time, n), make([]time.Time, n)
	tokens, states, attempts, approved := make([]int64, n), make([]int16, n), make([]int32, n), make([]bool, n)
	for i := range n {
		tools[i], owners[i], digests[i], outcomes[i] = tool, "owner", principal, []byte("{}")
		times[i], later[i] = now, now.Add(time.Hour)
		tokens[i], states[i], attempts[i] = 1, 2, 1
	}
	sessions := make([][]byte, n)
	for i := range sessions {
		sessions[i] = session
	}
	var none []byte
	var noTimes []time.Time
	return map[string]Query{
		"insertMany": {SQL: s.q.insertMany, Args: []any{keys, tools, digests, digests, owners, later, times, sessions, sessions, labels,
			later, approved, tokens, make([][]byte, n)}, Before: throughIndexes},
		"finishMany": {SQL: s.q.finishMany, Args: []any{keys, tokens, states, attempts, outcomes, times, later, approved, none, noTimes, noTimes}, Before: throughIndexes},
	}
}

// BesideQueries are s's statements that look for the records beside a
// claim's slot — the lone claim's INSERT, the batch's, and the locked
// path's reads — for a claim of tool, principal and session fenced by
// fence ("session" or "principal"); the INSERTs are explained, not run.
func BesideQueries(s *Store, now time.Time, tool string, principal, session []byte, fence string) map[string]Query {
	scope := session
	if fence == "principal" {
		scope = principal
	}
	req := storekit.ClaimRequest{Key: "beside/plan", Tool: tool, Owner: "owner", Now: now, Lease: time.Minute}
	copy(req.Principal[:], principal)
	copy(req.Session[:], session)
	copy(req.FenceScope[:], scope)
	insert, args := s.insertArgs(&req, "")
	key, owner, label := []string{req.Key}, []string{"owner"}, []string{""}
	times, later := []time.Time{now}, []time.Time{now.Add(time.Minute)}
	q := map[string]Query{
		"insert_" + fence: {SQL: insert, Args: args},
		"insertMany_" + fence: {SQL: s.q.insertMany, Args: []any{key, []string{tool}, [][]byte{principal}, [][]byte{principal}, owner, later, times,
			[][]byte{session}, [][]byte{scope}, label, later, []bool{false}, []int64{0}, [][]byte{nil}}, Before: throughIndexes},
	}
	if fence == "principal" {
		q["besideOfPrincipalForUpdate"] = Query{SQL: s.q.besideOfPrincipalForUpdate, Args: []any{tool, principal, req.Key}}
	} else {
		q["besideForUpdate"] = Query{SQL: s.q.besideForUpdate, Args: []any{tool, principal, session, req.Key}}
	}
	return q
}
