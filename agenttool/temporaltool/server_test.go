package temporaltool_test

import (
	"context"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/temporaltool"
	"github.com/retrysafe/retrysafe/envelope"
)

// devServer starts a Temporal development server (temporal server
// start-dev, in memory) for the test, and returns a client of it. It
// skips the test when the temporal command is not installed.
func devServer(t *testing.T) client.Client {
	t.Helper()
	bin, err := exec.LookPath("temporal")
	if err != nil {
		t.Skip("no Temporal server: the temporal command is not on PATH (install the Temporal CLI to run this test)")
	}
	port, httpPort := freePort(t), freePort(t)
	ctx, stop := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
		"--port", strconv.Itoa(port), "--http-port", strconv.Itoa(httpPort), "--log-level", "error")
	if err := cmd.Start(); err != nil {
		stop()
		t.Fatalf("starting the Temporal development server: %v", err)
	}
	t.Cleanup(func() {
		stop() // ends the server this test started, by its process
		_ = cmd.Wait()
	})
	quiet := log.NewStructuredLogger(slog.New(slog.DiscardHandler))
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := client.Dial(client.Options{HostPort: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Logger: quiet})
		if err == nil {
			if _, err = c.CheckHealth(ctx, nil); err == nil {
				t.Cleanup(c.Close)
				return c
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Temporal development server did not answer within a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The promises, on a real server: a lost reply retried by the server's
// retry policy is one order; a conversation goes on across
// Continue-As-New (the server's FirstRunID), so the model's repeat in the
// next run is replayed; and a workflow ID reused by a new execution gives
// its steps new actions.
func TestWithServer(t *testing.T) {
	c := devServer(t)
	const queue = "retrysafe-test"
	l := newLedger(true)
	l.crash = 1
	a := mustActivity(t, l.tool(t, l.options(agenttool.Keyed, boltStore(t))))
	w := worker.New(c, queue, worker.Options{})
	a.Register(w)
	w.RegisterWorkflowWithOptions(calls(a), workflow.RegisterOptions{Name: "calls"})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, cs []temporaltool.Call, can int) ([]envelope.Envelope, error) {
		out, err := calls(a)(ctx, cs[:1])
		if err != nil || can == 0 {
			return out, err
		}
		return nil, workflow.NewContinueAsNewError(ctx, "conversation", cs[1:], can-1)
	}, workflow.RegisterOptions{Name: "conversation"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	start := func(id, name string, args ...any) []envelope.Envelope {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, name, args...)
		if err != nil {
			t.Fatal(err)
		}
		var out []envelope.Envelope
		if err := run.Get(ctx, &out); err != nil {
			t.Fatalf("workflow %s: %v", id, err)
		}
		for _, e := range out {
			t.Logf("%s: %s", id, e)
		}
		return out
	}

	got := start("lost-reply", "calls", []temporaltool.Call{call(tea, temporaltool.ByInput)})
	want(t, got[0], envelope.Success, "")
	if !got[0].Replayed {
		t.Errorf("the retried lost reply is not replayed: %s", got[0])
	}
	l.check(t, 1)

	got = start("conversation-9", "conversation", []temporaltool.Call{call(coffee, temporaltool.ByInput), call(coffee, temporaltool.ByInput)}, 1)
	if len(got) != 1 || !got[0].Replayed {
		t.Errorf("after Continue-As-New the repeated order is not replayed: %v", got)
	}
	l.check(t, 2)

	for i := range 2 {
		got = start("order-7", "calls", []temporaltool.Call{call(`{"item":"milk","qty":1}`, temporaltool.ByStep)})
		want(t, got[0], envelope.Success, "")
		if got[0].Replayed {
			t.Errorf("execution %d of a reused workflow ID replays an earlier execution's step: %s", i+1, got[0])
		}
	}
	l.check(t, 4)
}
