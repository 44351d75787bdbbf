package temporaltool

import (
	"testing"

	"go.temporal.io/sdk/workflow"
)

// The default sessions, over the runs Temporal makes of one workflow: the
// IDs each run reports (as a server fills them in; the SDK's test
// environment leaves FirstRunID and OriginalRunID empty) and whether it
// must share its session with the first run.
func TestSessionOverRuns(t *testing.T) {
	first := workflow.Info{WorkflowExecution: workflow.Execution{ID: "order-7", RunID: "r1"}, FirstRunID: "r1", OriginalRunID: "r1"}
	for _, tc := range []struct {
		name       string
		run        workflow.Info
		agentSame  bool // the same conversation as the first run
		stepSame   bool // the same steps as the first run
		stepReason string
	}{
		{"a retry of an activity (the same run)", first, true, true, "retries of one activity are one action"},
		{"continue-as-new", workflow.Info{WorkflowExecution: workflow.Execution{ID: "order-7", RunID: "r2"}, FirstRunID: "r1", OriginalRunID: "r2"},
			true, false, "activity IDs start again in a new run: its steps are new"},
		{"reset", workflow.Info{WorkflowExecution: workflow.Execution{ID: "order-7", RunID: "r3"}, FirstRunID: "r1", OriginalRunID: "r1"},
			true, true, "a reset runs the same steps again: they meet their records"},
		{"the workflow ID reused by a new execution", workflow.Info{WorkflowExecution: workflow.Execution{ID: "order-7", RunID: "r9"}, FirstRunID: "r9", OriginalRunID: "r9"},
			false, false, "another execution: new actions"},
		{"another workflow", workflow.Info{WorkflowExecution: workflow.Execution{ID: "order-8", RunID: "r1"}, FirstRunID: "r1", OriginalRunID: "r1"},
			false, false, "another workflow: new actions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if same := session(&tc.run, ByInput) == session(&first, ByInput); same != tc.agentSame {
				t.Errorf("agent: same conversation %v, want %v", same, tc.agentSame)
			}
			if same := session(&tc.run, ByStep) == session(&first, ByStep); same != tc.stepSame {
				t.Errorf("step: same steps %v, want %v: %s", same, tc.stepSame, tc.stepReason)
			}
		})
	}

	// Each run of a cron workflow is a conversation of its own, although
	// Temporal chains them under one FirstRunID.
	cron1 := workflow.Info{WorkflowExecution: workflow.Execution{ID: "digest", RunID: "c1"}, FirstRunID: "c1", OriginalRunID: "c1", CronSchedule: "0 8 * * *"}
	cron2 := workflow.Info{WorkflowExecution: workflow.Execution{ID: "digest", RunID: "c2"}, FirstRunID: "c1", OriginalRunID: "c2", CronSchedule: "0 8 * * *"}
	if session(&cron1, ByInput) == session(&cron2, ByInput) {
		t.Error("two runs of a cron workflow share a conversation: the second day's digest would replay the first's")
	}

	// The test environment's runs: the run ID stands in.
	test := workflow.Info{WorkflowExecution: workflow.Execution{ID: "w", RunID: "r"}}
	if got := session(&test, ByInput); got != "w/r" {
		t.Errorf("session without chain IDs %q, want w/r", got)
	}
}
