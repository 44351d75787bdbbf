package pgstore_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storetest"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) agenttool.Store { return pgtest.Open(t) },
		Kill: func(t *testing.T, s agenttool.Store) { s.(*pgstore.Store).Pool().Close() },
		Reopen: func(t *testing.T, s agenttool.Store) agenttool.Store {
			schema := s.(*pgstore.Store).Schema()
			s.(*pgstore.Store).Close()
			again, err := pgstore.Open(context.Background(), &pgstore.Options{URL: pgtest.URL(t), Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { again.Close() })
			return again
		},
		Twin: func(t *testing.T, s agenttool.Store) agenttool.Store {
			twin, err := pgstore.Open(context.Background(), &pgstore.Options{URL: pgtest.URL(t), Schema: s.(*pgstore.Store).Schema()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { twin.Close() })
			return twin
		},
		Gather: gather,
	})
}

// A store given a pool that runs its statements in another of pgx's query
// modes keeps every promise: the simple protocol (which a pooler in
// transaction mode needs), a statement described at each run or not at
// all, and the default mode with the cache of descriptions turned off
// (description_cache_capacity=0), with which the statements planned at
// each run cannot use pgx's cache of descriptions either.
func TestConformanceInEveryQueryMode(t *testing.T) {
	for _, mode := range []struct {
		name string
		set  func(*pgx.ConnConfig)
	}{
		{"simple_protocol", func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol }},
		{"exec", func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = pgx.QueryExecModeExec }},
		{"describe_exec", func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = pgx.QueryExecModeDescribeExec }},
		{"cache_describe", func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe }},
		{"cache_statement without descriptions", func(c *pgx.ConnConfig) { c.DescriptionCacheCapacity = 0 }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			url := pgtest.URL(t)
			open := func(t *testing.T, schema string) agenttool.Store {
				cfg, err := pgxpool.ParseConfig(url)
				if err != nil {
					t.Fatal(err)
				}
				mode.set(cfg.ConnConfig)
				pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				s, err := pgstore.Open(context.Background(), &pgstore.Options{Pool: pool, Schema: schema})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			schema := func(s agenttool.Store) string { return s.(*pgstore.Store).Schema() }
			storetest.Run(t, storetest.Harness{
				Open: func(t *testing.T) agenttool.Store { return open(t, pgtest.Schema(t, url)) },
				Kill: func(t *testing.T, s agenttool.Store) { s.(*pgstore.Store).Pool().Close() },
				Reopen: func(t *testing.T, s agenttool.Store) agenttool.Store {
					s.(*pgstore.Store).Pool().Close()
					return open(t, schema(s))
				},
				Twin:   func(t *testing.T, s agenttool.Store) agenttool.Store { return open(t, schema(s)) },
				Gather: gather,
			})
		})
	}
}

// The batches of the group commit written as pipelined single statements
// (the alternative BenchmarkGroupCommit measures) keep the same promises.
func TestGroupCommitPipelined(t *testing.T) {
	storetest.RunGroupCommit(t, storetest.Harness{
		Open: func(t *testing.T) agenttool.Store {
			s := pgtest.Open(t)
			pgstore.Pipeline(s)
			return s
		},
		Gather: gather,
	})
}

// gather gathers the next n writes of a kind into one batch, with a
// failpoint, and checks when the test ends that the batch was written.
func gather(t *testing.T, s agenttool.Store, w storetest.Writes, n int, f storetest.Fault) {
	store := s.(*pgstore.Store)
	count := func() int64 {
		st := store.GroupCommitStats()
		if w == storetest.Claims {
			return st.ClaimBatches
		}
		return st.OutcomeBatches
	}
	before := count()
	t.Cleanup(func() {
		if count() == before {
			t.Errorf("no batch of %s was written: the test did not check one", w)
		}
	})
	fault := map[storetest.Fault]int{storetest.RowRefused: pgstore.FaultRow,
		storetest.LostBeforeCommit: pgstore.FaultLostBeforeCommit, storetest.LostAfterCommit: pgstore.FaultLostAfterCommit}[f]
	if w == storetest.Claims {
		pgstore.GatherClaims(store, n, fault)
	} else {
		pgstore.GatherOutcomes(store, n, fault)
	}
}

func TestOpenErrors(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	if _, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: "Robert'); DROP TABLE students;--"}); err == nil || !strings.Contains(err.Error(), "schema name") {
		t.Errorf("a hostile schema name: %v", err)
	}
	t.Setenv("DATABASE_URL", "")
	if _, err := pgstore.Open(ctx, nil); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("no URL: %v", err)
	}
	if _, err := pgstore.Open(ctx, &pgstore.Options{URL: "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}); err == nil {
		t.Error("Open succeeded with no server")
	}
}

func TestConcurrentOpenMigratesOnce(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.Schema(t, url)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			s, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Open: %v", err)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n, versions int
	err = conn.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT version) FROM "+schema+".migrations").Scan(&n, &versions)
	if err != nil || n != versions || n < 2 {
		t.Errorf("migrations table has %d rows for %d versions (%v); want each version applied once", n, versions, err)
	}
	// A schema written by a newer retrysafe is refused, not misread.
	if _, err := conn.Exec(context.Background(), "INSERT INTO "+schema+".migrations (version) VALUES (99)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema}); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("Open of a newer schema: %v", err)
	}
}

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
