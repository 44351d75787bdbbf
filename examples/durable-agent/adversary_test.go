package main

import (
	"flag"
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

var adversaryPlan = adversary.Plan{
	Tool:     "book_flight",
	Base:     `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`,
	Reworded: `{"flight":"TP 1234","date":"2026-12-12","passenger":"Ana M. Lima"}`,
}

// The wire adversary drives the durable agent's Temporal path (the SDK's
// test environment, bbolt): one booking per logical action.
func TestAdversary_TemporalBooksOnce(t *testing.T) {
	inTemporalTestEnvironment(t)
	t.Setenv("DATABASE_URL", "")
	ex := adversary.WithLostRequests(example, 6)
	orig := ex.Flags
	ex.Flags = func(fs *flag.FlagSet) { orig(fs); fs.Set("temporal", "test-environment") }
	for i, fault := range []string{"lost-response", "none", "unavailable", "slow", adversary.LostRequest} {
		for _, at := range []bool{false, true} {
			if at && fault != adversary.LostRequest {
				continue // the first call succeeds: a reworded copy in its message is a second action by design
			}
			t.Run(fault, func(t *testing.T) {
				adversary.RunWire(t, ex, adversary.WireRun{Plan: adversaryPlan, Fault: fault, Want: 1, Seed: uint64(70 + i), RewordAtOnce: at, PerMessage: true})
			})
		}
	}
}

// The same on the DBOS path (PostgreSQL).
func TestAdversary_DBOSBooksOnce(t *testing.T) {
	url := pgtest.URL(t)
	ss, ds := pgtest.Schema(t, url), pgtest.Schema(t, url)
	ex := adversary.WithLostRequests(example, 6)
	orig := ex.Flags
	ex.Flags = func(fs *flag.FlagSet) { orig(fs); fs.Set("store-schema", ss); fs.Set("dbos-schema", ds) }
	for i, fault := range []string{"lost-response", "none", "slow", adversary.LostRequest} {
		t.Run(fault, func(t *testing.T) {
			adversary.RunWire(t, ex, adversary.WireRun{Plan: adversaryPlan, Fault: fault, Want: 1, Seed: uint64(80 + i), PerMessage: true})
		})
	}
}
