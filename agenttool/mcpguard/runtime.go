package mcpguard

import (
	"os"
	"runtime"
	"runtime/debug"
)

// TuneRuntime sets the Go runtime as `retrysafe guard` runs it, for a
// program whose work is the guard's; each setting the environment names
// (GOGC, GOMAXPROCS) is left as it says.
//
//   - GOGC=400. A call through the guard decodes JSON-RPC twice more than
//     a call straight to the server, and the MCP SDK's decoder allocates
//     a buffer for every message: collecting less often costs a few
//     megabytes of heap and takes about a tenth off a call's time.
//   - At least two Ps (GOMAXPROCS), also on one CPU. A store's commit
//     waits for the disk in a system call; with one P, calls that arrive
//     over the network meanwhile are not read until it ends, so no call
//     ever queues behind a commit to share the next one, and the guard
//     commits every write alone: on one core, half the calls a second
//     (docs/performance.md, "The guard"). A second P reads them while the
//     first waits. Setting it stops the runtime's own updates of
//     GOMAXPROCS, which only a process of one CPU would have had.
func TuneRuntime() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < minProcs {
		runtime.GOMAXPROCS(minProcs)
	}
}

const (
	gcPercent = 400
	minProcs  = 2
)
