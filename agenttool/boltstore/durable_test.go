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

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
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
	p := testproc.Start(t, "TestDurableHelper", "RETRYSAFE_DURABLE_DB="+path)
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
