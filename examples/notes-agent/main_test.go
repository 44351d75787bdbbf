package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
	"github.com/retrysafe/retrysafe/internal/testproc"
)

func run(t *testing.T, args ...string) (demo.Summary, string) {
	t.Helper()
	var out bytes.Buffer
	sum, err := demo.Run(context.Background(), example, args, &out, os.Getenv)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return sum, out.String()
}

func TestFaults(t *testing.T) {
	db := filepath.Join(t.TempDir(), "notes.db")
	sum, out := run(t, "-db", db)
	if sum.Effects != 1 || len(sum.Envelopes) != 2 || sum.Envelopes[0].Status != envelope.Success ||
		sum.Envelopes[1].Error == nil || sum.Envelopes[1].Error.Code != envelope.CodeKeyReused {
		t.Fatalf("none: %+v\n%s", sum, out)
	}
	if !strings.Contains(out, "INC-104 notes: 1") {
		t.Errorf("transcript:\n%s", out)
	}
	sum, out = run(t, "-db", filepath.Join(t.TempDir(), "notes.db"), "-fault", "closed-incident")
	if sum.Effects != 0 || len(sum.Envelopes) != 1 || sum.Envelopes[0].Status != envelope.DefiniteFailure || sum.Envelopes[0].Error.Code != "incident_closed" {
		t.Fatalf("closed-incident: %+v\n%s", sum, out)
	}
}

// TestCrashHelper is the process that TestCrashRecovery kills; it does
// nothing in a normal test run.
func TestCrashHelper(t *testing.T) {
	at, db := os.Getenv("NOTES_CRASH_AT"), os.Getenv("NOTES_DB")
	if at == "" {
		t.Skip("run by TestCrashRecovery only")
	}
	demo.Run(context.Background(), example, []string{"-crash-at", at, "-db", db}, os.Stdout, os.Getenv)
	t.Fatal("the process was meant to be killed")
}

// TestCrashRecovery kills the program at each crash point with SIGKILL, then
// runs it again on the same store: the action finishes with exactly one note.
func TestCrashRecovery(t *testing.T) {
	for _, at := range []string{"before-effect", "after-effect", "after-record"} {
		t.Run(at, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "notes.db")
			p := testproc.Start(t, "TestCrashHelper", "NOTES_CRASH_AT="+at, "NOTES_DB="+db)
			reached := p.Until(func(line string) bool { return strings.Contains(line, "killing the process "+at) })
			for p.Lines.Scan() {
			}
			err := p.Wait()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.String() != "signal: killed" || !reached {
				t.Fatalf("the first run was not killed at %s (%v, reached %v):\n%s", at, err, reached, p.Stderr.String())
			}

			sum, transcript := run(t, "-db", db)
			first := sum.Envelopes[0]
			if sum.Effects != 1 || first.Status != envelope.Success {
				t.Fatalf("after a crash %s: %d notes, first envelope %s\n%s", at, sum.Effects, first, transcript)
			}
			switch at {
			case "before-effect": // nothing happened: the action runs now
				if first.Reconciled || first.Replayed {
					t.Errorf("before-effect: %s, want a fresh attempt", first)
				}
			case "after-effect": // it happened, unrecorded: the reconciler finds it
				if !first.Reconciled || first.Replayed {
					t.Errorf("after-effect: %s, want reconciled", first)
				}
			case "after-record": // recorded, never replied: replayed
				if !first.Replayed {
					t.Errorf("after-record: %s, want replayed", first)
				}
			}
		})
	}
}
