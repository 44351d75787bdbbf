package boltstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A failing write in a batch leaves the others' outcomes intact: they commit,
// once; the failing one gets its error and leaves nothing behind.
func TestGroupCommitFailingWriteLeavesOthersIntact(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "g.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err })
	g := &groupCommit{db: db}
	ctx := context.Background()

	// A first write holds the commit open, so that the next ones queue up
	// and share one batch.
	release := make(chan struct{})
	holding := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		g.update(ctx, func(tx *bolt.Tx) error {
			close(holding)
			<-release
			return tx.Bucket([]byte("b")).Put([]byte("first"), []byte("1"))
		})
	})
	<-holding

	const n = 8
	errBoom := errors.New("boom")
	var runs [n]atomic.Int32
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = g.update(ctx, func(tx *bolt.Tx) error {
				runs[i].Add(1)
				b := tx.Bucket([]byte("b"))
				if err := b.Put([]byte(fmt.Sprintf("k%d", i)), []byte("v")); err != nil {
					return err
				}
				if i == 3 {
					return errBoom // after a partial write of its own
				}
				return nil
			})
		})
	}
	// Let all n queue behind the held commit.
	for deadline := time.Now().Add(10 * time.Second); ; {
		g.mu.Lock()
		queued := len(g.queue)
		g.mu.Unlock()
		if queued == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()

	db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		for i := range n {
			got := b.Get([]byte(fmt.Sprintf("k%d", i)))
			switch {
			case i == 3 && (got != nil || !errors.Is(errs[i], errBoom)):
				t.Errorf("the failing write: value %q, error %v; want nothing written and its error", got, errs[i])
			case i != 3 && (got == nil || errs[i] != nil):
				t.Errorf("write %d: value %q, error %v; want it committed", i, got, errs[i])
			}
		}
		return nil
	})
	// What may run twice: a write queued before the failing one ran in the
	// failed batch and again alone; only the second run committed. Those
	// after it ran alone only.
	for i := range n {
		if r := runs[i].Load(); r < 1 || r > 2 || (i == 3 && r != 2) {
			t.Errorf("write %d ran %d times", i, r)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running || len(g.queue) != 0 {
		t.Errorf("group commit left running=%v with %d queued", g.running, len(g.queue))
	}
}

// A lone write commits at once: no batch delay.
func TestGroupCommitLoneWriteDoesNotWait(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "g.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := &groupCommit{db: db}
	var calls int
	for range 50 {
		if err := g.update(context.Background(), func(tx *bolt.Tx) error { calls++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 50 {
		t.Errorf("%d runs for 50 lone writes", calls)
	}
	if g.running {
		t.Error("a lone writer left the group commit running")
	}
}
