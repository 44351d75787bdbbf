package main

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// The peers benchmark runs every action each way to success (a workflow
// that failed, or a guarded call that did not succeed, stops it) and
// reports a figure for each.
func TestPeersMeasureEveryWayToSuccess(t *testing.T) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		t.Skip("DATABASE_URL is not set")
	}
	var out bytes.Buffer
	if err := runPeers(&out, true, url, true); err != nil {
		t.Fatal(err)
	}
	var rep PeersReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	for name, v := range map[string]float64{"lone DBOS": rep.LoneDBOSUs, "lone retrysafe": rep.LoneRetrysafeUs, "lone both": rep.LoneBothUs,
		"64 DBOS": rep.ConcDBOS, "64 retrysafe": rep.ConcRetrysafe, "64 both": rep.ConcBoth} {
		if v <= 0 {
			t.Errorf("%s: %v, want a measured figure; report %+v", name, v, rep)
		}
	}
}
