package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// A short soak — 16 callers for six seconds, records living three —
// applies no action twice and returns no envelope the destination
// contradicts, on boltstore and (with DATABASE_URL) pgstore; its sweeper
// deletes the records that expire. The long run is
// go run ./internal/bench -soak.
func TestSoakAppliesNothingTwiceAndNeverLies(t *testing.T) {
	url := os.Getenv("DATABASE_URL")
	stores := "bolt"
	if url != "" {
		stores += ",pg"
	}
	cfg, err := newSoakConfig(6*time.Second, 16, 3*time.Second, time.Second, stores, url)
	if err != nil {
		t.Fatal(err)
	}
	var out, lines strings.Builder
	err = runSoak(&out, &lines, cfg)
	t.Log(lines.String())
	if err != nil {
		t.Fatal(err)
	}
	var rep SoakReport
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("the JSON line: %v\n%s", err, out.String())
	}
	if len(rep.Stores) != len(cfg.Stores) {
		t.Fatalf("%d stores reported, want %d", len(rep.Stores), len(cfg.Stores))
	}
	for _, s := range rep.Stores {
		if s.Duplicates != 0 || s.Lies != 0 {
			t.Errorf("%s: %d actions applied twice, %d lying envelopes: %v", s.Store, s.Duplicates, s.Lies, s.LieSamples)
		}
		if s.Calls < 100 || s.Effects == 0 || s.Deleted == 0 {
			t.Errorf("%s: %d calls, %d effects, %d expired records deleted: the load did not run", s.Store, s.Calls, s.Effects, s.Deleted)
		}
	}
}
