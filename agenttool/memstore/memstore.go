// Package memstore is an in-memory storekit.Store for tests, examples and
// single-process demos.
//
// It keeps nothing across a restart: a process that crashes after a tool's
// effect forgets the key, and a retry then runs the effect again. Use
// boltstore (one process) or pgstore (many replicas) wherever the effect
// matters.
package memstore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Store is an in-memory store. It is safe for concurrent use. The zero value
// is not usable; call [New].
type Store struct {
	mu      sync.Mutex
	index   map[string]int                        // key → its entry in entries
	entries []entry                               // records, in slots reused after a delete
	free    []int                                 // empty slots of entries
	expiry  expiries                              // when records may be swept
	open    map[scope]map[string]struct{}         // keys of open records, by tool and principal
	slots   map[storekit.Slot]string              // the key of the record that holds each slot
	beside  map[storekit.Slot]map[string]struct{} // keys of records beside their session's slot (Record.Beside), by tool and principal
	token   uint64
	closed  bool
}

var (
	_ storekit.Store      = (*Store)(nil)
	_ storekit.LocalStore = (*Store)(nil)
	_ storekit.Counter    = (*Store)(nil)
	_ storekit.Importer   = (*Store)(nil)
)

// Local reports true: the store never waits on a network (see
// storekit.LocalStore).
func (s *Store) Local() bool { return true }

// New returns an empty store.
func New() *Store {
	return &Store{index: make(map[string]int), open: make(map[scope]map[string]struct{}), slots: make(map[storekit.Slot]string),
		beside: make(map[storekit.Slot]map[string]struct{})}
}

// scope is what the open index is keyed by: the unknown fence asks for the
// open records of one tool and principal.
type scope struct {
	tool      string
	principal storekit.Digest
}

// indexOpen adds e's key to, or removes it from, the open index.
func (s *Store) indexOpen(e *entry, open bool) {
	sc := scope{e.tool, e.principal}
	keys := s.open[sc]
	if open {
		if keys == nil {
			keys = make(map[string]struct{})
			s.open[sc] = keys
		}
		keys[e.key] = struct{}{}
		return
	}
	delete(keys, e.key)
	if len(keys) == 0 {
		delete(s.open, sc)
	}
}

func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return storekit.ErrClosed
	}
	return nil
}

// get returns the record for key, through r (the caller's), and its slot in
// entries; or nil and -1.
func (s *Store) get(key string, r *storekit.Record) (*storekit.Record, int) {
	i, ok := s.index[key]
	if !ok {
		return nil, -1
	}
	*r = s.entries[i].record()
	return r, i
}

// indexBeside adds r's key to, or removes it from, the index of records
// beside their session's slot, by tool and principal.
func (s *Store) indexBeside(e *entry, beside bool) {
	sl := storekit.Slot{Tool: e.tool, Scope: e.principal}
	keys := s.beside[sl]
	if beside {
		if keys == nil {
			keys = make(map[string]struct{})
			s.beside[sl] = keys
		}
		keys[e.key] = struct{}{}
		return
	}
	delete(keys, e.key)
	if len(keys) == 0 {
		delete(s.beside, sl)
	}
}

// lookup returns the slot of key's entry, or -1.
func (s *Store) lookup(key string) int {
	if i, ok := s.index[key]; ok {
		return i
	}
	return -1
}

// delete removes the record of key, in slot i.
func (s *Store) delete(key string, i int) {
	s.indexOpen(&s.entries[i], false)
	if s.entries[i].beside() {
		s.indexBeside(&s.entries[i], false)
	}
	s.leaveSlot(&s.entries[i])
	delete(s.index, key)
	s.entries[i] = entry{}
	s.free = append(s.free, i)
}

// put stores r in slot i, the slot of its key's record, or in a new slot if
// i is -1. Outcomes are never modified in place: Finish is handed its
// outcome (see storekit.FinishRequest), and what leaves the store is cloned.
func (s *Store) put(i int, r storekit.Record) {
	was := int64(zeroTime)
	if i >= 0 {
		was = s.entries[i].sweepAt()
	}
	if i >= 0 && s.entries[i].open() {
		s.indexOpen(&s.entries[i], false)
	}
	if i >= 0 {
		s.leaveSlot(&s.entries[i])
		if s.entries[i].beside() {
			s.indexBeside(&s.entries[i], false)
		}
	}
	if r.HoldsSlot() {
		s.slots[r.Slot()] = r.Key
	}
	switch n := len(s.free); {
	case i >= 0:
	case n > 0:
		i, s.free = s.free[n-1], s.free[:n-1]
		s.index[r.Key] = i
	default:
		i = len(s.entries)
		s.index[r.Key] = i
		s.entries = append(s.entries, entry{})
	}
	s.entries[i] = newEntry(&r)
	if r.Open() {
		s.indexOpen(&s.entries[i], true)
	}
	if r.Beside() {
		s.indexBeside(&s.entries[i], true)
	}
	if at := s.entries[i].sweepAt(); at != zeroTime && at != was {
		s.expiry.push(expiry{at: at, key: r.Key})
	}
	if len(s.expiry) > 2*len(s.index)+64 {
		s.reindexExpiry()
	}
}

// reindexExpiry builds the expiry heap again from the records. An entry
// whose record changed stays in the heap until its time comes, and a
// record's time may come earlier than its entry's (a mark told ends long
// before 2262): once such entries outnumber the records, they go.
func (s *Store) reindexExpiry() {
	clear(s.expiry)
	s.expiry = s.expiry[:0]
	for _, i := range s.index {
		if at := s.entries[i].sweepAt(); at != zeroTime {
			s.expiry.push(expiry{at: at, key: s.entries[i].key})
		}
	}
}

// leaveSlot removes e from the slot index, if it holds its slot.
func (s *Store) leaveSlot(e *entry) {
	if e.fenceScope == (storekit.Digest{}) {
		return
	}
	sl := storekit.Slot{Tool: e.tool, Scope: e.fenceScope}
	if s.slots[sl] == e.key {
		delete(s.slots, sl)
	}
}

// occupants returns what holds req's claim back, for storekit.DecideClaim:
// the record of another key that holds its slot, and, for a claim fenced
// by session or by principal, the records beside that slot
// (storekit.ClaimRequest.Beside), in key order. s.mu is held.
func (s *Store) occupants(req *storekit.ClaimRequest) []storekit.Record {
	if req.FenceScope == (storekit.Digest{}) {
		return nil
	}
	var out []storekit.Record
	if k, ok := s.slots[req.Slot()]; ok && k != req.Key {
		out = append(out, s.entries[s.index[k]].record())
	}
	if !req.GathersBeside() {
		return out
	}
	keys := s.beside[storekit.Slot{Tool: req.Tool, Scope: req.Principal}]
	if len(keys) == 0 {
		return out
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if r := s.entries[s.index[k]].record(); req.Beside(&r) {
			out = append(out, r)
		}
	}
	return out
}

// entry is a record as the store keeps it, with its times as Unix
// nanoseconds. It is about half the size of a Record and has
// fewer pointers for the garbage collector to follow, which a store holding
// many records pays for on every collection.
type entry struct {
	key, tool     string
	owner         string
	label         string
	replaces      string
	replacedBy    string
	standsFor     string
	outcome       []byte
	input         []byte
	resolution    *storekit.Resolution
	principal     storekit.Digest
	session       storekit.Digest
	fingerprint   storekit.Digest
	fenceScope    storekit.Digest
	token         uint64
	noticeUntil   int64
	leaseExpiry   int64
	created       int64
	updated       int64
	expires       int64
	definition    uint64
	attempts      int32
	state         storekit.State
	retryApproved bool
	takenOver     bool
}

func newEntry(r *storekit.Record) entry {
	return entry{
		key: r.Key, tool: r.Tool, owner: r.Owner, label: r.Label, outcome: r.Outcome, input: r.Input, resolution: r.Resolution,
		principal: r.Principal, session: r.Session, fingerprint: r.Fingerprint, token: r.Token,
		fenceScope: r.FenceScope, replaces: r.Replaces, replacedBy: r.ReplacedBy, noticeUntil: unixNano(r.NoticeUntil),
		standsFor:   r.StandsFor,
		leaseExpiry: unixNano(r.LeaseExpiry), created: unixNano(r.Created),
		updated: unixNano(r.Updated), expires: unixNano(r.Expires),
		attempts: int32(r.Attempts), state: r.State, retryApproved: r.RetryApproved, takenOver: r.TakenOver,
		definition: r.Definition,
	}
}

// open is Record.Open.
func (e *entry) open() bool {
	return e.state == storekit.Pending || (e.state == storekit.Unknown && !e.retryApproved)
}

// beside is Record.Beside.
func (e *entry) beside() bool {
	return (e.state == storekit.Failed && e.noticeUntil != zeroTime) || e.fenceScope != e.session &&
		(e.state == storekit.Pending || e.state == storekit.Unknown || (e.state == storekit.Succeeded && e.noticeUntil != zeroTime))
}

// lifetime is the part of e's record that says when it may be swept.
func (e *entry) lifetime() storekit.Record {
	return storekit.Record{State: e.state, RetryApproved: e.retryApproved, Expires: fromUnixNano(e.expires), NoticeUntil: fromUnixNano(e.noticeUntil)}
}

// sweepAt is Record.SweepAt, in Unix nanoseconds.
func (e *entry) sweepAt() int64 {
	r := e.lifetime()
	return unixNano(r.SweepAt())
}

// sweepable is Record.Sweepable.
func (e *entry) sweepable(now time.Time) bool {
	r := e.lifetime()
	return r.Sweepable(now)
}

func (e *entry) record() storekit.Record {
	return storekit.Record{
		Key: e.key, Tool: e.tool, State: e.state, Principal: e.principal, Session: e.session, Fingerprint: e.fingerprint,
		Owner: e.owner, Token: e.token, LeaseExpiry: fromUnixNano(e.leaseExpiry), Attempts: int(e.attempts),
		Outcome: e.outcome, Created: fromUnixNano(e.created), Updated: fromUnixNano(e.updated),
		Expires: fromUnixNano(e.expires), RetryApproved: e.retryApproved, Resolution: e.resolution, TakenOver: e.takenOver,
		Label: e.label, FenceScope: e.fenceScope, Replaces: e.replaces, ReplacedBy: e.replacedBy,
		NoticeUntil: fromUnixNano(e.noticeUntil), StandsFor: e.standsFor, Definition: e.definition, Input: e.input,
	}
}

// zeroTime stands for the zero time.Time, whose Unix nanoseconds do not fit
// an int64.
const zeroTime = math.MinInt64

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return zeroTime
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == zeroTime {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (s *Store) nextToken() (uint64, error) {
	s.token++
	return s.token, nil
}

// Claim implements storekit.Store.
func (s *Store) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if err := s.lock(ctx); err != nil {
		return storekit.ClaimResult{}, err
	}
	defer s.mu.Unlock()
	var cur storekit.Record
	existing, slot := s.get(req.Key, &cur)
	d, err := storekit.DecideClaim(existing, s.occupants(&req), req, s.nextToken)
	if err != nil {
		return storekit.ClaimResult{}, err
	}
	for _, o := range d.Occupants {
		s.put(s.lookup(o.Key), o)
	}
	res := d.Result
	if d.Write {
		s.put(slot, res.Record)
	}
	res.Record.Outcome, res.Record.Input = slices.Clone(res.Record.Outcome), slices.Clone(res.Record.Input)
	if res.Blocked != nil {
		res.Blocked.Outcome, res.Blocked.Input = slices.Clone(res.Blocked.Outcome), slices.Clone(res.Blocked.Input)
	}
	return res, nil
}

// Finish implements storekit.Store.
func (s *Store) Finish(ctx context.Context, req storekit.FinishRequest) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	var cur storekit.Record
	existing, slot := s.get(req.Key, &cur)
	rec, err := storekit.DecideFinish(existing, req)
	if err != nil {
		return err
	}
	s.put(slot, rec)
	return nil
}

// Release implements storekit.Store.
func (s *Store) Release(ctx context.Context, key string, token uint64) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	var cur storekit.Record
	existing, slot := s.get(key, &cur)
	if err := storekit.DecideRelease(existing, key, token); err != nil {
		return err
	}
	s.delete(key, slot)
	return nil
}

// Mark implements storekit.Store.
func (s *Store) Mark(ctx context.Context, req storekit.MarkRequest) (storekit.Record, error) {
	if err := s.lock(ctx); err != nil {
		return storekit.Record{}, err
	}
	defer s.mu.Unlock()
	var cur storekit.Record
	existing, slot := s.get(req.Key, &cur)
	rec, write, err := storekit.DecideMark(existing, req)
	if err != nil {
		return storekit.Record{}, err
	}
	if write {
		s.put(slot, rec)
	}
	rec.Outcome, rec.Input = slices.Clone(rec.Outcome), slices.Clone(rec.Input)
	return rec, nil
}

// Renew implements storekit.Store.
func (s *Store) Renew(ctx context.Context, req storekit.RenewRequest) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	var cur storekit.Record
	existing, slot := s.get(req.Key, &cur)
	rec, err := storekit.DecideRenew(existing, req)
	if err != nil {
		return err
	}
	s.put(slot, rec)
	return nil
}

// Get implements storekit.Store.
func (s *Store) Get(ctx context.Context, key string) (storekit.Record, error) {
	if err := s.lock(ctx); err != nil {
		return storekit.Record{}, err
	}
	defer s.mu.Unlock()
	i := s.lookup(key)
	if i < 0 {
		return storekit.Record{}, fmt.Errorf("memstore: %s: %w", key, storekit.ErrNotFound)
	}
	r := s.entries[i].record()
	r.Outcome, r.Input = slices.Clone(r.Outcome), slices.Clone(r.Input)
	return r, nil
}

// Sweep implements storekit.Store. It visits only the records whose
// lifetime has ended (kept in order of expiry), not every record, so a
// long-running process can sweep often.
func (s *Store) Sweep(ctx context.Context, req storekit.SweepRequest) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	limit := req.Limit
	if limit <= 0 {
		limit = storekit.DefaultSweepLimit
	}
	n, now := 0, req.Now
	for nowNs := now.UnixNano(); n < limit && len(s.expiry) > 0 && s.expiry[0].at <= nowNs; {
		e := s.expiry.pop()
		// The entry is a hint: the record may have changed or gone since.
		if i := s.lookup(e.key); i >= 0 && s.entries[i].sweepAt() == e.at && s.entries[i].sweepable(now) {
			s.delete(e.key, i)
			n++
		}
	}
	if len(s.expiry) > 2*len(s.index)+64 {
		s.reindexExpiry()
	}
	return n, nil
}

// expiry says that the record of key may be swept from at, if it has not
// changed since.
type expiry struct {
	at  int64 // Unix nanoseconds
	key string
}

// expiries is a min-heap of expiries by time: a sweep visits only the
// records it deletes (and entries left by records that changed), not every
// record.
type expiries []expiry

func (h *expiries) push(e expiry) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if q[i].at >= q[parent].at {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

func (h *expiries) pop() expiry {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = expiry{}
	q = q[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(q) && q[l].at < q[least].at {
			least = l
		}
		if r < len(q) && q[r].at < q[least].at {
			least = r
		}
		if least == i {
			break
		}
		q[i], q[least] = q[least], q[i]
		i = least
	}
	*h = q
	return top
}

// ListUnknown implements storekit.Store.
func (s *Store) ListUnknown(ctx context.Context, req storekit.ListRequest) ([]storekit.Record, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	var out []storekit.Record
	visit := func(k string, i int) {
		if e := &s.entries[i]; k > req.After && e.open() {
			if r := e.record(); req.Lists(&r) {
				r.Outcome, r.Input = slices.Clone(r.Outcome), slices.Clone(r.Input)
				out = append(out, r)
			}
		}
	}
	if req.Tool != "" && req.Principal != nil {
		for k := range s.open[scope{req.Tool, *req.Principal}] {
			visit(k, s.index[k])
		}
	} else {
		for _, keys := range s.open { // the open records only, not the store
			for k := range keys {
				visit(k, s.index[k])
			}
		}
	}
	slices.SortFunc(out, func(a, b storekit.Record) int { return strings.Compare(a.Key, b.Key) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Count implements storekit.Counter.
func (s *Store) Count(ctx context.Context, req storekit.CountRequest) ([]storekit.Count, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	tally := map[storekit.Count]int{}
	for _, i := range s.index {
		e := &s.entries[i]
		if req.Principal == nil || e.principal == *req.Principal {
			tally[storekit.Count{Tool: e.tool, State: e.state, RetryApproved: e.retryApproved}]++
		}
	}
	return storekit.SortCounts(tally), nil
}

// Import implements storekit.Importer.
func (s *Store) Import(ctx context.Context, recs []storekit.Record) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	seen := make(map[string]bool, len(recs))
	for i := range recs {
		if err := storekit.ValidateImport(&recs[i]); err != nil {
			return err
		}
		if s.lookup(recs[i].Key) >= 0 || seen[recs[i].Key] {
			return fmt.Errorf("memstore: importing %s: the key exists: %w", recs[i].Key, storekit.ErrInvalidRequest)
		}
		seen[recs[i].Key] = true
	}
	if err := storekit.CheckImportSlots(recs, func(sl storekit.Slot) (string, error) { return s.slots[sl], nil }); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	for _, r := range recs {
		r.Outcome, r.Input = slices.Clone(r.Outcome), slices.Clone(r.Input)
		s.put(-1, r)
		s.token = max(s.token, r.Token)
	}
	return nil
}

// CountUnknown implements storekit.Counter, from the index of open records.
func (s *Store) CountUnknown(ctx context.Context) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for _, keys := range s.open {
		for k := range keys {
			if e := &s.entries[s.index[k]]; e.state == storekit.Unknown && !e.retryApproved {
				n++
			}
		}
	}
	return n, nil
}

// Len returns the number of records, whatever their state.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.index)
}

// Close makes every later call fail with storekit.ErrClosed, as a store that
// has gone away would.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
