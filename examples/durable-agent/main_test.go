package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

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
