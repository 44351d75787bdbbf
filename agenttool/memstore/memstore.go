// Package memstore is an in-memory agenttool.Store for tests, examples and
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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
)

// Store is an in-memory store. It is safe for concurrent use. The zero value
// is not usable; call [New].
type Store struct {
	mu      sync.Mutex
	records map[string]agenttool.Record
	token   uint64
	closed  bool
}

var (
	_ agenttool.Store      = (*Store)(nil)
	_ agenttool.LocalStore = (*Store)(nil)
)

// Local reports true: the store never waits on a network (see
// agenttool.LocalStore).
func (s *Store) Local() bool { return true }

// New returns an empty store.
func New() *Store {
	return &Store{records: make(map[string]agenttool.Record)}
}

func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return agenttool.ErrClosed
	}
	return nil
}

// get returns the record for key, or nil, through r (the caller's).
func (s *Store) get(key string, r *agenttool.Record) *agenttool.Record {
	var ok bool
	if *r, ok = s.records[key]; !ok {
		return nil
	}
	return r
}

// put stores r. Outcomes are never modified in place: Finish is handed its
// outcome (see agenttool.FinishRequest), and what leaves the store is cloned.
func (s *Store) put(r agenttool.Record) {
	s.records[r.Key] = r
}

func (s *Store) nextToken() (uint64, error) {
	s.token++
	return s.token, nil
}

// Claim implements agenttool.Store.
func (s *Store) Claim(ctx context.Context, req agenttool.ClaimRequest) (agenttool.ClaimResult, error) {
	if err := s.lock(ctx); err != nil {
		return agenttool.ClaimResult{}, err
	}
	defer s.mu.Unlock()
	var cur agenttool.Record
	res, write, err := agenttool.DecideClaim(s.get(req.Key, &cur), req, s.nextToken)
	if err != nil {
		return agenttool.ClaimResult{}, err
	}
	if write {
		s.put(res.Record)
	}
	res.Record.Outcome = slices.Clone(res.Record.Outcome)
	return res, nil
}

// Finish implements agenttool.Store.
func (s *Store) Finish(ctx context.Context, req agenttool.FinishRequest) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	var cur agenttool.Record
	rec, err := agenttool.DecideFinish(s.get(req.Key, &cur), req)
	if err != nil {
		return err
	}
	s.put(rec)
	return nil
}

// Release implements agenttool.Store.
func (s *Store) Release(ctx context.Context, key string, token uint64) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	var cur agenttool.Record
	if err := agenttool.DecideRelease(s.get(key, &cur), key, token); err != nil {
		return err
	}
	delete(s.records, key)
	return nil
}

// Renew implements agenttool.Store.
func (s *Store) Renew(ctx context.Context, key string, token uint64, until time.Time) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	var cur agenttool.Record
	rec, err := agenttool.DecideRenew(s.get(key, &cur), key, token, until, time.Now())
	if err != nil {
		return err
	}
	s.put(rec)
	return nil
}

// Get implements agenttool.Store.
func (s *Store) Get(ctx context.Context, key string) (agenttool.Record, error) {
	if err := s.lock(ctx); err != nil {
		return agenttool.Record{}, err
	}
	defer s.mu.Unlock()
	r, ok := s.records[key]
	if !ok {
		return agenttool.Record{}, fmt.Errorf("memstore: %s: %w", key, agenttool.ErrNotFound)
	}
	r.Outcome = slices.Clone(r.Outcome)
	return r, nil
}

// Sweep implements agenttool.Store.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for k, r := range s.records {
		if r.Sweepable(now) {
			delete(s.records, k)
			n++
		}
	}
	return n, nil
}

// ListUnknown implements agenttool.Store.
func (s *Store) ListUnknown(ctx context.Context, req agenttool.ListRequest) ([]agenttool.Record, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	var out []agenttool.Record
	for k, r := range s.records {
		if k > req.After && r.AwaitsReconciliation(req.Now) && (req.Principal == nil || *req.Principal == r.Principal) {
			r.Outcome = slices.Clone(r.Outcome)
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b agenttool.Record) int { return strings.Compare(a.Key, b.Key) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Len returns the number of records, whatever their state.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// Close makes every later call fail with agenttool.ErrClosed, as a store that
// has gone away would.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
