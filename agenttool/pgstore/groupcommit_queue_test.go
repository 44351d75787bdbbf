package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// The queue of the group commit, apart from the database: who writes
// alone, who shares a batch, and what a caller that gives up leaves
// behind.

type req struct{ key string }

// fakeQueue is a group commit whose writes answer their key, upper-cased;
// its lone writes wait for the release channel when hold is set.
type fakeQueue struct {
	g        *groupCommit[req, string]
	mu       sync.Mutex
	batches  [][]string
	loneCtx  []context.Context
	hold     chan struct{}
	inLone   chan struct{}
	orphans  []string
	manyCtxs []context.Context
	block    chan struct{} // when set, batches wait for it
}

func newFakeQueue() *fakeQueue {
	f := &fakeQueue{}
	f.g = &groupCommit[req, string]{
		key: func(r *req) string { return r.key },
		lone: func(ctx context.Context, r *req) (string, error) {
			f.mu.Lock()
			f.loneCtx = append(f.loneCtx, ctx)
			hold, in := f.hold, f.inLone
			f.hold = nil
			f.mu.Unlock()
			if hold != nil {
				close(in)
				<-hold
			}
			return "lone:" + r.key, nil
		},
		many: func(ctx context.Context, batch []*gathered[req, string]) {
			var keys []string
			for _, w := range batch {
				keys = append(keys, w.req.key)
				w.ans = "batch:" + w.req.key
			}
			slices.Sort(keys)
			f.mu.Lock()
			f.batches = append(f.batches, keys)
			f.manyCtxs = append(f.manyCtxs, ctx)
			block := f.block
			f.mu.Unlock()
			if block != nil {
				select {
				case <-block:
				case <-ctx.Done():
				}
			}
		},
		orphan: func(w *gathered[req, string]) {
			f.mu.Lock()
			f.orphans = append(f.orphans, w.req.key)
			f.mu.Unlock()
		},
	}
	return f
}

// queued waits until n writes wait in the queue.
func (f *fakeQueue) queued(t *testing.T, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.g.mu.Lock()
		l := len(f.g.queue)
		f.g.mu.Unlock()
		if l >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", l, n)
		}
		runtime.Gosched()
	}
}

type ctxKey struct{}

// A lone caller writes at once, on its own goroutine and context: it
// never waits for company.
func TestGroupCommitLoneCallerWritesAtOnce(t *testing.T) {
	f := newFakeQueue()
	ctx := context.WithValue(context.Background(), ctxKey{}, "mine")
	for i := range 3 {
		ans, err := f.g.do(ctx, req{fmt.Sprint(i)})
		if err != nil || ans != fmt.Sprintf("lone:%d", i) {
			t.Fatalf("lone write %d: %q, %v", i, ans, err)
		}
	}
	if len(f.batches) != 0 || len(f.loneCtx) != 3 || f.loneCtx[0].Value(ctxKey{}) != "mine" {
		t.Errorf("lone writes went in batches %v, or not on their caller's context", f.batches)
	}
}

// Writes that arrive while one runs share the next batch, one per key;
// each caller gets its own answer.
func TestGroupCommitWritesArrivingMeanwhileShareABatch(t *testing.T) {
	f := newFakeQueue()
	f.hold, f.inLone = make(chan struct{}), make(chan struct{})
	release := f.hold
	var wg sync.WaitGroup
	wg.Go(func() { f.g.do(context.Background(), req{"first"}) })
	<-f.inLone
	keys := []string{"a", "b", "c", "b", "d"}
	answers := make([]string, len(keys))
	for i, k := range keys {
		wg.Go(func() { answers[i], _ = f.g.do(context.Background(), req{k}) })
	}
	f.queued(t, len(keys))
	close(release)
	wg.Wait()
	for i, k := range keys {
		if answers[i] != "batch:"+k && answers[i] != "lone:"+k {
			t.Errorf("caller %d (%s) got %q", i, k, answers[i])
		}
	}
	if len(f.batches) == 0 || !slices.Equal(f.batches[0], []string{"a", "b", "c", "d"}) {
		t.Errorf("batches %v; want the first to hold a, b, c and d once each (the second b waits for the next)", f.batches)
	}
	// The committer goes idle once the queue is empty.
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		f.g.mu.Lock()
		running, queued := f.g.running, len(f.g.queue)
		f.g.mu.Unlock()
		if !running && queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue did not go idle: running %v, %d queued", running, queued)
		}
	}
}

// A caller whose context ends while its write is in a batch returns at
// once; when every caller of a batch has given up, the batch's context
// ends; a claim granted to a caller that left is handed to orphan.
func TestGroupCommitCallerThatGivesUpReturnsAtOnce(t *testing.T) {
	f := newFakeQueue()
	f.block = make(chan struct{})
	f.g.gather(2)
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { _, err := f.g.do(ctxA, req{"a"}); errs <- err }()
	go func() { _, err := f.g.do(ctxB, req{"b"}); errs <- err }()
	// Both are in the blocked batch once it has started.
	for {
		f.mu.Lock()
		started := len(f.manyCtxs) == 1
		f.mu.Unlock()
		if started {
			break
		}
		runtime.Gosched()
	}
	cancelA()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: %v", err)
	}
	f.mu.Lock()
	batchCtx := f.manyCtxs[0]
	f.mu.Unlock()
	if batchCtx.Err() != nil {
		t.Fatal("the batch's context ended while a caller still waited")
	}
	cancelB()
	<-errs
	<-batchCtx.Done() // every caller gave up: the batch's context ends
	for {
		f.mu.Lock()
		n := len(f.orphans)
		f.mu.Unlock()
		if n == 2 {
			break
		}
		runtime.Gosched()
	}
	slices.Sort(f.orphans)
	if !slices.Equal(f.orphans, []string{"a", "b"}) {
		t.Errorf("orphans %v; want both answers handed over", f.orphans)
	}
}
