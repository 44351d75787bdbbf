package boltstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/envelope"
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
		agenttool.Options{Store: s, Class: agenttool.Reconcilable})
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
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableHelper$")
	cmd.Env = append(os.Environ(), "RETRYSAFE_DURABLE_DB="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	var returned []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if ref, ok := strings.CutPrefix(line, "DONE "); ok {
			returned = append(returned, ref)
			if len(returned) == 300 {
				cmd.Process.Kill() // SIGKILL, with more calls in flight
				break
			}
		} else if strings.HasPrefix(line, "FAILED") {
			t.Fatal(line)
		}
	}
	cmd.Wait()
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
