package main

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The floor for concurrent calls on PostgreSQL: the bare pair, group
// committed by hand on a table of the same columns with no index beyond
// the key. Each batch of concurrent claims is one multi-row INSERT … ON
// CONFLICT DO NOTHING RETURNING, their outcomes one multi-row UPDATE …
// FROM unnest; two batchers a phase, so that one batch gathers while the
// other is in flight. Nothing is decided, nothing fenced but by the token:
// what a store does beyond it is what retrysafe costs.

// batcher group-commits one phase: callers hand it a key and wait; a
// batcher takes every key that waits and writes them with one statement.
type batcher struct {
	mu      sync.Mutex
	waiting []*pending
	wake    chan struct{}
	write   func(ctx context.Context, keys []string, tokens []int64) ([]int64, error)
}

type pending struct {
	key   string
	token int64
	done  chan error
}

func newBatcher(ctx context.Context, workers int, write func(ctx context.Context, keys []string, tokens []int64) ([]int64, error)) *batcher {
	b := &batcher{wake: make(chan struct{}, 1), write: write}
	for range workers {
		go b.run(ctx)
	}
	return b
}

// do writes key (with token, for an outcome) in the next batch, and
// returns what the statement returned for it.
func (b *batcher) do(key string, token int64) (int64, error) {
	p := &pending{key: key, token: token, done: make(chan error, 1)}
	b.mu.Lock()
	b.waiting = append(b.waiting, p)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	err := <-p.done
	return p.token, err
}

func (b *batcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		for {
			b.mu.Lock()
			batch := b.waiting
			b.waiting = nil
			b.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			keys, tokens := make([]string, len(batch)), make([]int64, len(batch))
			for i, p := range batch {
				keys[i], tokens[i] = p.key, p.token
			}
			out, err := b.write(ctx, keys, tokens)
			for i, p := range batch {
				if err == nil && i < len(out) {
					p.token = out[i]
				}
				p.done <- err
			}
		}
	}
}

// groupedPair returns the hand group-committed pair on pool and table,
// its tokens from the sequence tokens: a call claims its key in one batch
// and writes its outcome in another. With slots, each claim also fills
// the store's fence columns (fence_scope and session, distinct per key,
// as 64 conversations' are), for table a copy of the store's own.
func groupedPair(ctx context.Context, pool *pgxpool.Pool, table, tokens string, slots bool) func(key string) error {
	digest := make([]byte, 32)
	cols, vals := "", ""
	if slots {
		cols, vals = ", fence_scope, session", ", convert_to(k, 'UTF8'), convert_to(k, 'UTF8')"
	}
	claims := newBatcher(ctx, 2, func(ctx context.Context, keys []string, _ []int64) ([]int64, error) {
		now := time.Now()
		rows, err := pool.Query(ctx, `INSERT INTO `+table+` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated`+cols+`)
			SELECT k, 'send_email', 1, $2, $2, 'owner', nextval('`+tokens+`'), $3, 0, $4, $4`+vals+` FROM unnest($1::text[]) AS k
			ON CONFLICT (key) DO NOTHING RETURNING key, token`, keys, digest, now.Add(time.Minute), now)
		if err != nil {
			return nil, err
		}
		got := map[string]int64{}
		for rows.Next() {
			var k string
			var t int64
			if err := rows.Scan(&k, &t); err != nil {
				return nil, err
			}
			got[k] = t
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out := make([]int64, len(keys))
		for i, k := range keys {
			out[i] = got[k]
		}
		return out, nil
	})
	outcomes := newBatcher(ctx, 2, func(ctx context.Context, keys []string, tokens []int64) ([]int64, error) {
		now := time.Now()
		_, err := pool.Exec(ctx, `UPDATE `+table+` AS r SET state = 2, owner = '', lease_expiry = NULL, attempts = 1, outcome = $3,
			updated = $4, expires = $5 FROM unnest($1::text[], $2::int8[]) AS v(key, token)
			WHERE r.key = v.key AND r.token = v.token AND r.state = 1`, keys, tokens, recordSized, now, now.Add(24*time.Hour))
		return tokens, err
	})
	return func(key string) error {
		token, err := claims.do(key, 0)
		if err != nil {
			return err
		}
		_, err = outcomes.do(key, token)
		return err
	}
}
