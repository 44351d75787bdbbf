package main

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// -pgindexes measures the store's statements on copies of the table
// pgstore.Open made, with every secondary index it has, without each in
// turn, and with the key alone: a new index of a migration is measured
// without anyone listing it here.
func TestIndexCostsCoverEveryIndexOfTheStore(t *testing.T) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		t.Skip("DATABASE_URL is not set")
	}
	var out strings.Builder
	if err := runIndexes(context.Background(), &out, true, url, 20); err != nil {
		t.Fatal(err)
	}
	var rep IndexReport
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("the JSON line: %v\n%s", err, out.String())
	}
	all := rep.Costs[1]
	if rep.Costs[0].VsBare != 1 || all.Schema != "records, all indexes" {
		t.Fatalf("costs start %+v, %+v; want the bare pair, then all indexes", rep.Costs[0], all)
	}
	for _, want := range []string{"records_beside", "records_expires", "records_slot"} {
		if !slices.Contains(all.Indexes, want) {
			t.Errorf("all indexes %v: %s missing", all.Indexes, want)
		}
	}
	if len(rep.Costs) != len(all.Indexes)+3 {
		t.Errorf("%d schemas measured, want the bare pair, all, one without each of %d, the key alone", len(rep.Costs), len(all.Indexes))
	}
	for _, c := range rep.Costs {
		if c.PairNs <= 0 {
			t.Errorf("%s: %v ns a pair", c.Schema, c.PairNs)
		}
	}
}
