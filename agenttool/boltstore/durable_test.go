package boltstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/testproc"
)

// TestDurableHelper makes guarded calls from 32 goroutines and reports each
// one as soon as it returns; TestEveryReturnedCallIsDurable kills it.
func TestDurableHelper(t *testing.T) {
	path := os.Getenv("RETRYSAFE_DURABLE_DB")
	if path == "" {
		t.Skip("run by TestEveryReturnedCallIsDurable only")
	}
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	tool, err := agenttool.New("send_email", "", func(ctx context.Context, in note) (string, error) { return "sent", nil },
		agenttool.Options{Store: s, Class: agenttool.Reconcilable, SettledByOperators: true})
	if err != nil {
		t.Fatal(err)
	}
	var seq atomic.Int64
	var wg sync.WaitGroup
	if os.Getenv("RETRYSAFE_DURABLE_SWEEP") != "" {
		// Deletions beside the calls: pages are freed and reused while
		// the process is killed.
		go func() {
			for {
				storekit.SweepAll(context.Background(), s, time.Now(), 0, nil)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	for range 32 {
		wg.Go(func() {
			for {
				env := tool.Invoke(scope(), fmt.Sprintf(`{"text":"note %d"}`, seq.Add(1)))
				if env.Status != envelope.Success {
					fmt.Println("FAILED", env)
					return
				}
				fmt.Println("DONE", env.RequestRef) // one write(2): out of the process at once
			}
		})
	}
	wg.Wait()
}

// TestEveryReturnedCallIsDurable kills a process that is making concurrent
// calls (so group commit is batching them) right after some have returned:
// every call that returned has its record on reopening.
func TestEveryReturnedCallIsDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	returned := killWhileCalling(t, path)
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, ref := range returned {
		rec, err := s.Get(context.Background(), ref)
		if err != nil || rec.State != agenttool.Succeeded {
			t.Fatalf("%s returned success before the kill, but after reopening: %+v, %v", ref, rec, err)
		}
	}
}

// TestFileIsConsistentAfterAKillWhileSweeping kills a process that is
// making calls while it deletes a backlog of expired records one by one
// and drops generations as their windows end, so that its commits reuse
// freed pages. The freelist is not written with commits: Open
// rebuilds it from the pages the last committed root reaches. The file must
// pass bbolt's consistency check (no page both free and in use, none
// reachable twice) on reopening, and again after more calls and deletions
// have used the rebuilt freelist; every call that returned is there.
func TestFileIsConsistentAfterAKillWhileSweeping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var expired []agenttool.Record
	for i := range 10_000 {
		// Swept one by one from the records bucket: unknown, approved for
		// another attempt, expired.
		expired = append(expired, agenttool.Record{Key: fmt.Sprintf("send_email/expired-%05d", i), Tool: "send_email",
			State: agenttool.Unknown, RetryApproved: true, Token: uint64(i + 1), Outcome: []byte(`{"status":"success"}`),
			Created: now.Add(-2 * time.Hour), Updated: now.Add(-2 * time.Hour), Expires: now.Add(-time.Hour)})
		// Dropped a generation at a time: lifetimes of 8 s (windows of a
		// second) ending over the next four seconds, while the process
		// calls, sweeps and is killed.
		expired = append(expired, agenttool.Record{Key: fmt.Sprintf("send_email/expiring-%05d", i), Tool: "send_email",
			State: agenttool.Succeeded, Token: uint64(10_000 + i + 1), Outcome: []byte(`{"status":"success"}`),
			Created: now.Add(-8 * time.Second), Updated: now.Add(-8 * time.Second), Expires: now.Add(time.Duration(i%40) * 100 * time.Millisecond)})
	}
	if err := s.Import(context.Background(), expired); err != nil {
		t.Fatal(err)
	}
	s.Close()
	returned := killWhileCalling(t, path, "RETRYSAFE_DURABLE_SWEEP=1")
	check := func(when string, s *boltstore.Store) {
		t.Helper()
		s.DB().View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				t.Errorf("%s: %v", when, err)
			}
			return nil
		})
	}
	s, err = boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check("on reopening after the kill", s)
	for _, ref := range returned {
		if rec, err := s.Get(context.Background(), ref); err != nil || rec.State != agenttool.Succeeded {
			t.Fatalf("%s returned success before the kill, but after reopening: %+v, %v", ref, rec, err)
		}
	}
	tool, err := agenttool.New("send_email", "", func(ctx context.Context, in note) (string, error) { return "sent", nil },
		agenttool.Options{Store: s, Class: agenttool.Reconcilable, SettledByOperators: true})
	if err != nil {
		t.Fatal(err)
	}
	// Another conversation: the calls the kill interrupted are unknown now,
	// and hold theirs.
	after := agenttool.WithScope(context.Background(), "tenant-1/user-1", "after the kill")
	for i := range 200 {
		if env := tool.Invoke(after, fmt.Sprintf(`{"text":"after %d"}`, i)); env.Status != envelope.Success {
			t.Fatal(env)
		}
	}
	if _, err := storekit.SweepAll(context.Background(), s, time.Now(), 0, nil); err != nil {
		t.Fatal(err)
	}
	check("after more calls and deletions", s)
}

// killWhileCalling runs TestDurableHelper on the file at path and kills it
// (SIGKILL) once 300 calls have returned, with more in flight; it returns
// the references of the calls that returned.
func killWhileCalling(t *testing.T, path string, env ...string) []string {
	t.Helper()
	p := testproc.Start(t, "TestDurableHelper", append(env, "RETRYSAFE_DURABLE_DB="+path)...)
	var returned []string
	for p.Lines.Scan() {
		line := p.Lines.Text()
		if ref, ok := strings.CutPrefix(line, "DONE "); ok {
			returned = append(returned, ref)
			if len(returned) == 300 {
				p.Kill() // SIGKILL, with more calls in flight
				break
			}
		} else if strings.HasPrefix(line, "FAILED") {
			t.Fatal(line)
		}
	}
	p.Kill()
	if len(returned) < 300 {
		t.Fatalf("only %d calls returned before the helper stopped", len(returned))
	}
	return returned
}
