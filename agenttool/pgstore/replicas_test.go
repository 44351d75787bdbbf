package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/internal/testproc"
	"github.com/retrysafe/retrysafe/reconcile"
)

const (
	replicaActions    = 100
	replicaGoroutines = 16
)

type action struct {
	N int `json:"n"`
}

// TestReplicaHelper is one replica process of TestManyProcessesOneTruth. It
// does nothing in a normal test run.
func TestReplicaHelper(t *testing.T) {
	schema := os.Getenv("RETRYSAFE_REPLICA_SCHEMA")
	if schema == "" {
		t.Skip("run by TestManyProcessesOneTruth only")
	}
	victim := os.Getenv("RETRYSAFE_REPLICA_VICTIM") == "1"
	ctx := context.Background()
	store, err := pgstore.Open(ctx, &pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	pool := store.Pool()
	var inflight, held atomic.Int64
	deliver := func(ctx context.Context, a action) (string, error) {
		ref := agenttool.RequestRef(ctx)
		apply := func() error {
			_, err := pool.Exec(ctx, "INSERT INTO "+effects+" (ref, pid) VALUES ($1, $2)", ref, os.Getpid())
			return err
		}
		if victim {
			// Each goroutine's first action is held until the process is
			// killed: half of them after the effect, half before it.
			n := inflight.Add(1)
			if n <= replicaGoroutines {
				if n%2 == 0 {
					if err := apply(); err != nil {
						return "", err
					}
				}
				// The last goroutine held, its effect applied or not, tells
				// the test: every effect the victim applies is in by then.
				if held.Add(1) == replicaGoroutines {
					fmt.Println("INFLIGHT")
				}
				select {}
			}
		}
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		return ref, apply()
	}
	checker := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+effects+" WHERE ref = $1", ref).Scan(&n); err != nil {
			return reconcile.CantSayBecause(err)
		}
		if n > 0 {
			return reconcile.AppliedWith([]byte(strconv.Quote(ref)))
		}
		return reconcile.NotAppliedYet()
	})
	tool, err := agenttool.New("deliver", "Deliver one action.", deliver, agenttool.Options{
		Store: store, Class: agenttool.Reconcilable, Reconciler: checker,
		Lease: 600 * time.Millisecond, KeyTTL: time.Hour, WaitTimeout: 3 * time.Second,
		Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond},
		// The goroutines are an orchestrator's distinct actions, not a
		// model's resends: when one finds the killed replica's action
		// applied, the others need not wait for the user to hear of it.
		NoticeHold: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("READY")
	// Each action is a step of its own (an orchestrator's step id as the
	// session): distinct steps run at once, and each step's fence holds
	// its own retries while the killed replica's attempt is settled.
	scope := func(n int) context.Context { return agenttool.WithScope(ctx, "tenant-1", fmt.Sprintf("step-%d", n)) }
	var wg sync.WaitGroup
	failures := make(chan string, replicaGoroutines)
	for g := range replicaGoroutines {
		wg.Go(func() {
			order := rand.Perm(replicaActions)
			if victim { // distinct first actions, so that all 16 are held at once
				first := g * (replicaActions / replicaGoroutines)
				order = append([]int{first}, slices.DeleteFunc(order, func(n int) bool { return n == first })...)
			}
			for _, n := range order {
				in := fmt.Sprintf(`{"n":%d}`, n)
				// Calls of one step hold each other back while the killed
				// replica's actions are settled; on a loaded machine that
				// takes a while. What is checked is the outcome, not the time.
				var env envelope.Envelope
				for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); {
					env = tool.Invoke(scope(n), in)
					if env.Status == envelope.Success {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if env.Status != envelope.Success {
					failures <- fmt.Sprintf("action %d: %s", n, env)
					return
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	fmt.Println("DONE")
}

// replica starts one replica process.
func replica(t *testing.T, schema string, victim bool) *testproc.Proc {
	t.Helper()
	env := []string{"RETRYSAFE_REPLICA_SCHEMA=" + schema}
	if victim {
		env = append(env, "RETRYSAFE_REPLICA_VICTIM=1")
	}
	return testproc.Start(t, "TestReplicaHelper", env...)
}

// TestManyProcessesOneTruth races 4 processes of 16 goroutines on the same
// 100 logical actions against one PostgreSQL, with a destination table that
// records every effect: each action's effect must happen exactly once. The
// second run SIGKILLs one process mid-flight: its leases lapse, the others
// reconcile its actions, and still nothing is duplicated or lost.
func TestManyProcessesOneTruth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 8 processes")
	}
	url := pgtest.URL(t)
	for _, kill := range []bool{false, true} {
		t.Run(map[bool]string{false: "all live", true: "one killed"}[kill], func(t *testing.T) {
			schema := pgtest.Schema(t, url)
			ctx := context.Background()
			s, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Pool().Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "effects"}.Sanitize()+" (ref text NOT NULL, pid integer NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			var procs []*testproc.Proc
			victimPID := 0
			if kill {
				// The victim starts first and holds one claim per goroutine,
				// half of them after their effect; then the others start
				// racing on the same actions, and the victim is killed.
				victim := replica(t, schema, true)
				victimPID = victim.Cmd.Process.Pid
				victim.Until(func(line string) bool { return line == "INFLIGHT" })
				for range 3 {
					procs = append(procs, replica(t, schema, false))
				}
				time.Sleep(100 * time.Millisecond) // the survivors are at work, waiting on its keys
				victim.Kill()
			} else {
				for range 4 {
					procs = append(procs, replica(t, schema, false))
				}
			}
			for _, p := range procs {
				var said strings.Builder // what the replica printed: its test's failures
				done := p.Until(func(line string) bool { said.WriteString(line + "\n"); return line == "DONE" })
				for p.Lines.Scan() {
					said.WriteString(p.Lines.Text() + "\n")
				}
				if err := p.Wait(); err != nil || !done {
					t.Fatalf("replica failed: %v\n%s%s", err, said.String(), p.Stderr.String())
				}
			}
			rows, err := s.Pool().Query(ctx, "SELECT ref, count(*) FROM "+pgx.Identifier{schema, "effects"}.Sanitize()+" GROUP BY ref")
			if err != nil {
				t.Fatal(err)
			}
			counts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int, error) {
				var ref string
				var n int
				err := r.Scan(&ref, &n)
				if n != 1 {
					t.Errorf("%s took effect %d times", ref, n)
				}
				return n, err
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(counts) != replicaActions {
				t.Errorf("%d actions took effect, want all %d", len(counts), replicaActions)
			}
			var unknown int
			if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "records"}.Sanitize()+" WHERE state <> 2").Scan(&unknown); err != nil || unknown != 0 {
				t.Errorf("%d records not succeeded (%v)", unknown, err)
			}
			if kill {
				// Evidence that the kill hit mid-flight: the victim applied
				// effects it never recorded, and survivors reconciled them.
				var byVictim, reconciled int
				s.Pool().QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "effects"}.Sanitize()+" WHERE pid = $1", victimPID).Scan(&byVictim)
				s.Pool().QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "records"}.Sanitize()+" WHERE position('\"reconciled\":true' in convert_from(outcome, 'UTF8')) > 0").Scan(&reconciled)
				if byVictim != replicaGoroutines/2 || reconciled < byVictim {
					t.Errorf("the kill did not land mid-flight: %d effects by the victim, %d actions reconciled", byVictim, reconciled)
				}
				t.Logf("the killed process applied %d effects; survivors found %d of them by reconciling", byVictim, reconciled)
			}
			t.Logf("%d actions, each applied once, across %s", len(counts), strings.ToLower(t.Name()))
		})
	}
}
