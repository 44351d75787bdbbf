package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// schemas gives a run its own schemas for retrysafe's records and DBOS's
// tables, dropped when the test ends.
func schemas(t *testing.T) []string {
	url := pgtest.URL(t)
	return []string{"-store-schema", pgtest.Schema(t, url), "-dbos-schema", pgtest.Schema(t, url)}
}

// Every fault ends in one booking: a success, then the model's "just to be
// sure" resend, a later step of the workflow, replayed; and the workflow
// started again under its ID answers from DBOS, with nothing run.
func TestFaults(t *testing.T) {
	for _, f := range example.Faults {
		t.Run(f.Name, func(t *testing.T) {
			var out bytes.Buffer
			sum, err := demo.Run(context.Background(), example, append(schemas(t), "-fault", f.Name), &out, os.Getenv)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if sum.Effects != 1 || len(sum.Envelopes) != 2 {
				t.Fatalf("effects %d, %d envelopes; want 1 booking, 2 envelopes\n%s", sum.Effects, len(sum.Envelopes), out.String())
			}
			first, second := sum.Envelopes[0], sum.Envelopes[1]
			if first.Status != envelope.Success || first.Replayed || second.Status != envelope.Success || !second.Replayed || first.RequestRef != second.RequestRef {
				t.Errorf("envelopes %s then %s; want a success, then the same action replayed", first, second)
			}
			if !strings.Contains(out.String(), "DBOS answered with the recorded result; no step ran") || !strings.HasSuffix(out.String(), "bookings: 1\n") {
				t.Errorf("transcript:\n%s", out.String())
			}
		})
	}
}

// Without DATABASE_URL the example says how to get a server, and runs nothing.
func TestWithoutADatabaseItSaysHowToStartOne(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	var out bytes.Buffer
	_, err := demo.Run(context.Background(), example, nil, &out, os.Getenv)
	if err == nil || !strings.Contains(err.Error(), "set DATABASE_URL") || !strings.Contains(err.Error(), "docker run") {
		t.Fatalf("without DATABASE_URL: %v", err)
	}
}

// The same agent on Temporal: each fault ends in one booking, a success
// then the model's resend, a later activity, replayed. The SDK's test
// environment runs the workflow and its activities in place of a server;
// TestTemporalServer runs them on one.
func TestTemporalFaults(t *testing.T) {
	inTemporalTestEnvironment(t)
	t.Setenv("DATABASE_URL", "") // a bbolt file: Temporal needs no PostgreSQL
	for _, f := range example.Faults {
		t.Run(f.Name, func(t *testing.T) {
			var out bytes.Buffer
			sum, err := demo.Run(context.Background(), example, []string{"-temporal", "test-environment", "-fault", f.Name}, &out, os.Getenv)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if sum.Effects != 1 || len(sum.Envelopes) != 2 {
				t.Fatalf("effects %d, %d envelopes; want 1 booking, 2 envelopes\n%s", sum.Effects, len(sum.Envelopes), out.String())
			}
			first, second := sum.Envelopes[0], sum.Envelopes[1]
			if first.Status != envelope.Success || first.Replayed || second.Status != envelope.Success || !second.Replayed || first.RequestRef != second.RequestRef {
				t.Errorf("envelopes %s then %s; want a success, then the same action replayed", first, second)
			}
		})
	}
}

// On a real Temporal server (temporal server start-dev) named by
// TEMPORAL_ADDRESS: one booking under a lost response.
func TestTemporalServer(t *testing.T) {
	addr := os.Getenv("TEMPORAL_ADDRESS")
	if addr == "" {
		t.Skip("TEMPORAL_ADDRESS is not set: no Temporal server to run on (temporal server start-dev, then TEMPORAL_ADDRESS=127.0.0.1:7233)")
	}
	var out bytes.Buffer
	sum, err := demo.Run(context.Background(), example, []string{"-temporal", addr}, &out, os.Getenv)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if sum.Effects != 1 {
		t.Fatalf("%d bookings; want 1\n%s", sum.Effects, out.String())
	}
}

// inTemporalTestEnvironment runs the agent's Temporal path, for the rest
// of the test, in the SDK's test environment in place of a server.
func inTemporalTestEnvironment(t *testing.T) {
	old := runTemporal
	runTemporal = func(ctx context.Context, run *demo.LoopRun, c conversation) (string, error) {
		var suite testsuite.WorkflowTestSuite
		suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
		env := suite.NewTestWorkflowEnvironment()
		if _, err := newTemporalAgent(run, env); err != nil {
			return "", err
		}
		env.ExecuteWorkflow("agent", c)
		var answer string
		if err := env.GetWorkflowResult(&answer); err != nil {
			return "", err
		}
		return answer, nil
	}
	t.Cleanup(func() { runTemporal = old })
}
