package pgstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// TestOutage stops PostgreSQL in the middle of a run: the tool is not run
// while the database is down (store_unavailable), nothing recorded before is
// lost, and calls succeed again once it is back.
func TestOutage(t *testing.T) {
	pgtest.URL(t) // skipped, loudly, without PostgreSQL
	srv := pgtest.StartServer(t)
	ctx := context.Background()
	store, err := pgstore.Open(ctx, &pgstore.Options{URL: srv.URL() + "&connect_timeout=2"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var runs atomic.Int64
	tool, err := agenttool.New("send_email", "Send an email.", func(ctx context.Context, in struct {
		To string `json:"to"`
	}) (string, error) {
		runs.Add(1)
		return "sent to " + in.To, nil
	}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, SettledByOperators: true, StoreTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	scope := agenttool.WithScope(ctx, "tenant-1", "outage")
	call := func(i int) envelope.Envelope {
		cctx, cancel := context.WithTimeout(scope, 20*time.Second)
		defer cancel()
		return tool.Invoke(cctx, fmt.Sprintf(`{"to":"user%d@example.com"}`, i))
	}

	for i := range 5 {
		if env := call(i); env.Status != envelope.Success {
			t.Fatalf("before the outage: %s", env)
		}
	}
	srv.Stop()
	for i := 5; i < 10; i++ {
		env := call(i)
		if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeStoreUnavailable || env.Next != envelope.Wait {
			t.Fatalf("during the outage: %s; want store_unavailable", env)
		}
	}
	if runs.Load() != 5 {
		t.Fatalf("the tool ran %d times; during the outage it must not run", runs.Load())
	}
	srv.Start()
	deadline := time.Now().Add(30 * time.Second)
	for i := range 10 {
		env := call(i)
		for env.Status != envelope.Success && env.Error.Code == envelope.CodeStoreUnavailable && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // the pool reconnects
			env = call(i)
		}
		if env.Status != envelope.Success {
			t.Fatalf("after the outage, action %d: %s", i, env)
		}
		if replayed := i < 5; env.Replayed != replayed {
			t.Errorf("action %d replayed=%v, want %v: the records from before the outage must survive it", i, env.Replayed, replayed)
		}
	}
	if runs.Load() != 10 {
		t.Errorf("the tool ran %d times in all, want 10", runs.Load())
	}
}
