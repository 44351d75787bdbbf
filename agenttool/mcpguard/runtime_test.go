package mcpguard_test

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
)

// The guard's runtime: two Ps at least, so that calls queue behind a
// commit that waits for the disk and share the next; GOGC 400; and what
// the environment names is left alone.
func TestTuneRuntime_TwoPsAndLessCollectionUnlessTheEnvironmentSays(t *testing.T) {
	procs, gc := runtime.GOMAXPROCS(0), debug.SetGCPercent(100)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs); debug.SetGCPercent(gc) })

	t.Setenv("GOMAXPROCS", "")
	t.Setenv("GOGC", "")
	runtime.GOMAXPROCS(1)
	mcpguard.TuneRuntime()
	if n := runtime.GOMAXPROCS(0); n != 2 {
		t.Errorf("GOMAXPROCS 1, none in the environment: %d after TuneRuntime, want 2", n)
	}
	if p := debug.SetGCPercent(100); p != 400 {
		t.Errorf("GOGC %d after TuneRuntime, want 400", p)
	}
	runtime.GOMAXPROCS(3)
	mcpguard.TuneRuntime()
	if n := runtime.GOMAXPROCS(0); n != 3 {
		t.Errorf("GOMAXPROCS 3: %d after TuneRuntime, want it left at 3", n)
	}

	t.Setenv("GOMAXPROCS", "1")
	t.Setenv("GOGC", "50")
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(50)
	mcpguard.TuneRuntime()
	if n, p := runtime.GOMAXPROCS(0), debug.SetGCPercent(50); n != 1 || p != 50 {
		t.Errorf("GOMAXPROCS=1 GOGC=50 in the environment: %d Ps and GOGC %d after TuneRuntime, want them left", n, p)
	}
}
