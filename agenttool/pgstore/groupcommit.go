package pgstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit. Claims of new keys (the INSERT of [Store.Claim]) and
// outcomes (the fenced UPDATE of [Store.Finish]) from one process share
// round trips and commits, each kind in its own queue:
//
//   - A write that arrives while no write of its kind is running runs at
//     once, alone, as one statement on the caller's context: a lone caller
//     never waits for company, and pays what a store without group commit
//     would.
//   - Writes that arrive while one runs queue up. When it ends, the queue is
//     written as one statement (one round trip, one commit) by a goroutine
//     of the store's, and so on while writes keep arriving. There is no
//     timer: the window is the time the previous write took, so it adapts
//     to the database's speed and to the load.
//   - Each caller gets its own answer: its token, or its refusal (a claim
//     whose key exists or whose slot is held goes on alone, to the locked
//     read-decide-write, exactly as a lone claim that met a conflict), or
//     ErrFenced (an outcome whose record is no longer held by its token).
//   - Two writes of one key never share a batch: the second waits for the
//     next one.
//
// What runs twice, and when (see batch.go): a batch the database refused
// as a whole (an ERROR: nothing of it was written) runs again, each write
// alone, so that one bad row fails only its own caller. A batch whose fate
// is unknown (the connection was lost, the backend killed, the reply never
// read) is looked up: every write found committed gets its answer, the
// others run again alone; if the lookup fails too, each caller gets the
// batch's error (fail closed, as a lone write's lost reply would).
//
// A caller whose context ends while its write waits or runs returns at
// once with the context's error. A batch runs on a context of its own that
// ends when every caller in it has given up, or at the latest of their
// deadlines; a claim granted in a batch after its caller gave up is
// released, so that no caller-less claim holds its key and slot until its
// lease lapses.

// maxBatch bounds the writes of one statement.
const maxBatch = 256

// recoverTimeout bounds the lookups and releases that settle a batch
// whose fate is unknown, or whose callers left.
const recoverTimeout = 5 * time.Second

// states of a gathered write.
const (
	waiting int32 = iota
	delivered
	abandoned
)

// gathered is one caller's write in a group commit, and its answer.
type gathered[Req, Ans any] struct {
	ctx context.Context
	req Req
	// Set by the batch before delivery.
	ans   Ans
	err   error
	alone bool // the batch did not write it: the caller runs it alone

	state atomic.Int32
	done  chan struct{} // closed on delivery
	life  *batchLife    // the batch it went into; under groupCommit.mu
}

// batchLife is the context of one batch: cancelled when the last of its
// callers gives up.
type batchLife struct {
	cancel context.CancelFunc
	left   int // callers still waiting; under groupCommit.mu
}

// groupCommit gathers the writes of one kind. It is safe for concurrent
// use.
type groupCommit[Req, Ans any] struct {
	// key names what a write changes: two writes of one key never share a
	// batch.
	key func(*Req) string
	// lone writes one request alone, on the caller's context.
	lone func(ctx context.Context, req *Req) (Ans, error)
	// many writes a batch of two or more, and sets each one's answer, error
	// or alone.
	many func(ctx context.Context, batch []*gathered[Req, Ans])
	// orphan, if set, is told of an answer whose caller gave up.
	orphan func(w *gathered[Req, Ans])

	mu      sync.Mutex
	queue   []*gathered[Req, Ans]
	running bool
	hold    int  // tests: gather this many writes before the next batch
	off     bool // tests and benchmarks: every write alone
}

// do writes req, alone or in a batch, and returns its answer.
func (g *groupCommit[Req, Ans]) do(ctx context.Context, req Req) (Ans, error) {
	var zero Ans
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if g.off {
		return g.lone(ctx, &req)
	}
	g.mu.Lock()
	if !g.running && g.hold == 0 {
		g.running = true
		g.mu.Unlock()
		return g.leadAlone(ctx, &req)
	}
	w := &gathered[Req, Ans]{ctx: ctx, req: req, done: make(chan struct{})}
	g.queue = append(g.queue, w)
	if g.hold > 0 && len(g.queue) >= g.hold {
		g.hold = 0
		if !g.running {
			g.startLocked()
		}
	}
	g.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		if w.state.CompareAndSwap(waiting, abandoned) {
			g.mu.Lock()
			if b := w.life; b != nil {
				if b.left--; b.left == 0 {
					b.cancel()
				}
			}
			g.mu.Unlock()
			return zero, ctx.Err()
		}
		<-w.done // delivered meanwhile: the answer stands
	}
	if w.alone {
		return g.lone(ctx, &w.req)
	}
	return w.ans, w.err
}

// leadAlone writes req alone, then starts the committer for the writes
// that queued meanwhile, or marks the queue idle — also if the write
// panics.
func (g *groupCommit[Req, Ans]) leadAlone(ctx context.Context, req *Req) (Ans, error) {
	defer func() {
		g.mu.Lock()
		g.startLocked()
		g.mu.Unlock()
	}()
	return g.lone(ctx, req)
}

// startLocked starts the committer if writes are queued, or marks the
// queue idle.
func (g *groupCommit[Req, Ans]) startLocked() {
	if len(g.queue) == 0 || g.hold > 0 {
		g.running = false
		return
	}
	g.running = true
	go g.commit()
}

// commit writes the queue in batches until it is empty.
func (g *groupCommit[Req, Ans]) commit() {
	for {
		g.mu.Lock()
		batch, life, ctx := g.takeLocked()
		if len(batch) == 0 {
			g.startLocked()
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		if len(batch) == 1 {
			w := batch[0]
			w.ans, w.err = g.lone(ctx, &w.req)
		} else {
			g.many(ctx, batch)
		}
		life.cancel()
		for _, w := range batch {
			if w.state.CompareAndSwap(waiting, delivered) {
				close(w.done)
			} else if g.orphan != nil && !w.alone {
				g.orphan(w)
			}
		}
	}
}

// takeLocked takes the next batch from the queue: the writes still
// waiting, one per key, at most maxBatch; the rest stay queued. Its
// context ends when every caller in it has given up, or at the latest of
// their deadlines.
func (g *groupCommit[Req, Ans]) takeLocked() ([]*gathered[Req, Ans], *batchLife, context.Context) {
	if g.hold > 0 {
		return nil, nil, nil
	}
	var batch, rest []*gathered[Req, Ans]
	seen := make(map[string]bool, len(g.queue))
	var latest time.Time
	bounded := true
	for _, w := range g.queue {
		if w.state.Load() == abandoned {
			continue
		}
		k := g.key(&w.req)
		if seen[k] || len(batch) == maxBatch {
			rest = append(rest, w)
			continue
		}
		seen[k] = true
		batch = append(batch, w)
		if d, ok := w.ctx.Deadline(); !ok {
			bounded = false
		} else if d.After(latest) {
			latest = d
		}
	}
	g.queue = rest
	if len(batch) == 0 {
		return nil, nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	if bounded {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadline(ctx, latest)
		inner := cancel
		cancel = func() { cancelDeadline(); inner() }
	}
	life := &batchLife{cancel: cancel, left: len(batch)}
	for _, w := range batch {
		w.life = life
	}
	return batch, life, ctx
}

// gather makes the next n writes wait for each other and go as one batch
// (tests).
func (g *groupCommit[Req, Ans]) gather(n int) {
	g.mu.Lock()
	g.hold = n
	g.mu.Unlock()
}
