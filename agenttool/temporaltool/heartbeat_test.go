package temporaltool_test

import (
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
)

// A call that runs longer than the activity's HeartbeatTimeout is kept
// alive by the activity's heartbeats (a third of the timeout apart):
// without them Temporal would take the worker for dead, time the
// activity out, and the workflow would hear an unknown outcome.
func TestHeartbeatsWhileTheCallRuns(t *testing.T) {
	l := newLedger(false)
	l.slow = 4 * time.Second
	o := l.options(agenttool.AtMostOnce, memstore.New())
	o.Lease = 3 * time.Second // the HeartbeatTimeout ActivityOptions sets
	o.AttemptTimeout = 6 * time.Second
	a := mustActivity(t, l.tool(t, o))
	if hb := a.ActivityOptions().HeartbeatTimeout; hb != o.Lease {
		t.Fatalf("HeartbeatTimeout %v, want the lease %v", hb, o.Lease)
	}
	env := newEnv(t, a)
	var beats atomic.Int32
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { beats.Add(1) })
	got := run(t, env, calls(a), []temporaltool.Call{call(tea, temporaltool.ByInput)})[0]
	want(t, got, envelope.Success, "")
	if n := beats.Load(); n < 2 {
		t.Errorf("%d heartbeats in a call of %v under a HeartbeatTimeout of %v", n, l.slow, o.Lease)
	}
	l.check(t, 1)
}
