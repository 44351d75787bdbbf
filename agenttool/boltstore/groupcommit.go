package boltstore

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Group commit. A write that arrives while no commit is running commits at
// once, alone: a lone caller pays one transaction, never a batch delay.
// Writes that arrive while a commit is running queue up; when it ends, the
// first of them leads one transaction for the whole queue, and so on. There
// is no timer. Every write is durable (its transaction committed and synced)
// before its caller proceeds.
//
// What may run twice: if any function in a batch fails, or the batch's
// commit fails, the batch is rolled back and every function in it runs again
// alone, in its own transaction (as bbolt's Batch does). This is safe
// because the functions here only read and write the transaction they are
// given: a rolled-back run leaves nothing behind, and a function that
// decides on the state it reads decides again on the state it reads then.
// [Store.Effect] passes this on to its caller's function, and says so.

type groupCommit struct {
	db *bolt.DB

	mu      sync.Mutex
	queue   []*write
	running bool
}

type write struct {
	fn   func(tx *bolt.Tx) error
	err  error
	done chan struct{} // closed when fn's outcome is durable
	lead chan struct{} // closed when this write must lead the next batch
}

// errRollback rolls a batch back after one of its functions failed.
var errRollback = errors.New("a write in the batch failed")

// update runs fn in a write transaction shared with the writes that arrived
// while the previous transaction was committing.
func (g *groupCommit) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := &write{fn: fn, done: make(chan struct{}), lead: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, w)
	if !g.running {
		g.running = true
		g.mu.Unlock()
		g.leadBatch()
	} else {
		g.mu.Unlock()
	}
	select {
	case <-w.done:
	case <-w.lead:
		g.leadBatch()
		<-w.done
	}
	return w.err
}

// leadBatch commits everything queued, then hands the lead to the first
// write that queued meanwhile, or stops.
func (g *groupCommit) leadBatch() {
	g.mu.Lock()
	batch := g.queue
	g.queue = nil
	g.mu.Unlock()

	g.commit(batch)

	g.mu.Lock()
	if len(g.queue) == 0 {
		g.running = false
		g.mu.Unlock()
		return
	}
	next := g.queue[0]
	g.mu.Unlock()
	close(next.lead)
}

func (g *groupCommit) commit(batch []*write) {
	if len(batch) > 1 {
		err := g.update1(func(tx *bolt.Tx) error {
			for _, w := range batch {
				if err := w.run(tx); err != nil {
					return errRollback
				}
			}
			return nil
		})
		if err == nil || errors.Is(err, ErrCommitHandlerPanicked) {
			for _, w := range batch {
				w.err = err
				close(w.done)
			}
			return
		}
		// Every write runs again alone, the failing one included.
	}
	for _, w := range batch {
		w.err = g.update1(w.run)
		close(w.done)
	}
}

// update1 runs one write transaction. A panic that escapes it comes from
// a commit handler that a write's function registered (tx.OnCommit), which
// bbolt runs after the commit, outside run's recovery: it is returned as
// an error wrapping ErrCommitHandlerPanicked, so that every writer of the
// transaction is answered and the next batch runs, instead of the store's
// writes waiting forever on a leader that is gone.
func (g *groupCommit) update1(fn func(tx *bolt.Tx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrCommitHandlerPanicked, r, debug.Stack())
		}
	}()
	return g.db.Update(fn)
}

// run runs the write's function. A panic in it (a callback of
// [Store.Effect] is the caller's code) fails this write only, as an error
// wrapping ErrPanicked returned to its own caller: the transaction rolls
// back, the other writes of the batch commit without it, and the store
// keeps working.
func (w *write) run(tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrPanicked, r, debug.Stack())
		}
	}()
	return w.fn(tx)
}

// ErrPanicked is wrapped by the error of a write whose function panicked;
// nothing of that write was committed.
var ErrPanicked = errors.New("boltstore: a write's function panicked")

// ErrCommitHandlerPanicked is wrapped by the error of each write of a
// transaction after which a commit handler panicked (one that a function
// given to [Store.Effect] registered with tx.OnCommit). bbolt runs commit
// handlers once the transaction has committed: the writes are durable,
// and their callers are told only that the outcome is uncertain, which a
// guarded call settles through its reconciler, never as not applied.
var ErrCommitHandlerPanicked = errors.New("boltstore: the transaction committed, then a commit handler panicked")
