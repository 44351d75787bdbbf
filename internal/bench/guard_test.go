package main

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// The test binary is also the bench's other processes (the server, the
// guard, the load of the run on separate cores), as the program is.
func TestMain(m *testing.M) {
	if asBenchProcess() {
		return
	}
	os.Exit(m.Run())
}

// The guard benchmark measures every path it reports: stdio and HTTP
// alone, 64 clients on shared cores, and with the guard on a core of its
// own — or says why that could not run.
func TestGuardMeasuresEveryPath(t *testing.T) {
	var out bytes.Buffer
	if err := runGuard(&out, true, true); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Guard GuardResult `json:"guard"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	g := rep.Guard
	for name, v := range map[string]float64{"stdio straight": float64(g.StdioDirectP50), "stdio guarded": float64(g.StdioGuardedP50),
		"HTTP straight": float64(g.HTTPDirectP50), "HTTP guarded": float64(g.HTTPGuardedP50),
		"64 straight": g.HTTP64Direct, "64 guarded": g.HTTP64Guarded} {
		if v <= 0 {
			t.Errorf("%s: %v, want a measured figure; report %+v", name, v, g)
		}
	}
	if g.StoreTimePerCall <= 0 || g.HTTPStoreTimePerCall <= 0 {
		t.Errorf("the guards' store time a call: stdio %v, HTTP %v; want both read from the guards", g.StoreTimePerCall, g.HTTPStoreTimePerCall)
	}
	if g.StdioBeyond == 0 || g.HTTPBeyond == 0 || g.StdioHop == 0 || g.HTTPHop == 0 || g.StdioProxy == 0 || g.HTTPProxy == 0 {
		t.Errorf("beyond the store's commits: stdio %v, HTTP %v; passed through: stdio %v, HTTP %v; a minimal proxy: stdio %v, HTTP %v; want all measured",
			g.StdioBeyond, g.HTTPBeyond, g.StdioHop, g.HTTPHop, g.StdioProxy, g.HTTPProxy)
	}
	switch {
	case g.OwnCore == nil && g.OwnCoreNot == "":
		t.Errorf("the run on separate cores: neither figures nor why not; report %+v", g)
	case g.OwnCore != nil && (g.OwnCore.Direct <= 0 || g.OwnCore.Guarded <= 0):
		t.Errorf("the run on separate cores: %+v, want measured figures", *g.OwnCore)
	case g.OwnCore == nil:
		t.Logf("the run on separate cores did not run: %s", g.OwnCoreNot)
	}
}
