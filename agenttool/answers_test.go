package agenttool

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
)

var update = flag.Bool("update", false, "rewrite testdata/answers.golden")

// sampleAnswers is one answer of every reason, with the facts it names.
func sampleAnswers() []struct {
	name string
	a    answer
} {
	other := &Record{Key: "send_email/other", State: Pending, LeaseExpiry: time.Date(2026, 12, 1, 12, 1, 0, 0, time.UTC)}
	done := &Record{Key: "send_email/other", State: Succeeded}
	result := json.RawMessage(`{"message_id":"<m1@mail.test>"}`)
	cause := errors.New("read tcp 127.0.0.1:25: i/o timeout")
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	return []struct {
		name string
		a    answer
	}{
		{"missing scope", answer{reason: reasonMissingScope}},
		{"invalid input", answer{reason: reasonInvalidInput, input: &envelope.Error{Code: envelope.CodeInvalidInput, Message: `field "to" is required`}}},
		{"cancelled", answer{reason: reasonCancelled, err: errors.New("context canceled")}},
		{"store unavailable", answer{reason: reasonStoreUnavailable, err: errors.New("connection refused")}},
		{"other principal", answer{reason: reasonOtherPrincipal}},
		{"other tool", answer{reason: reasonOtherTool}},
		{"other input", answer{reason: reasonOtherInput, other: done, now: now}},
		{"replay", answer{reason: reasonReplay, replay: envelope.Envelope{Version: envelope.Version, Status: envelope.Success,
			Tool: "send_email", RequestRef: "send_email/this", Attempts: 1, Result: result, Next: envelope.Continue}}},
		{"replay unreadable, succeeded", answer{reason: reasonReplayUnreadable, attempts: 1, state: Succeeded, err: cause}},
		{"replay unreadable, failed", answer{reason: reasonReplayUnreadable, attempts: 1, state: Failed, err: cause}},
		{"replaced, the other running", answer{reason: reasonReplaced, attempts: 1, other: other}},
		{"replaced, the other done", answer{reason: reasonReplaced, attempts: 1, other: done, result: result}},
		{"unknown, awaits reconciliation", answer{reason: reasonUnknownAwaits, attempts: 1, replayed: true}},
		{"store went back", answer{reason: reasonStoreWentBack, replayed: true}},
		{"unknown, sent otherwise", answer{reason: reasonSentOtherwise, attempts: 1, other: &Record{Key: "send_email/this", State: Unknown, Definition: 0x1f2e3d4c5b6a798a}, replayed: true}},
		{"approval pending", answer{reason: reasonApprovalPending, attempts: 1, why: "the outcome is unknown and awaits a person's decision", replayed: true}},
		{"in progress", answer{reason: reasonInProgress, attempts: 1}},
		{"in progress, its holder stopped", answer{reason: reasonInProgress, attempts: 1, now: now, checkAt: now.Add(46500 * time.Millisecond)}},
		{"earlier running", answer{reason: reasonEarlierRunning, other: other}},
		{"earlier running, its holder stopped", answer{reason: reasonEarlierRunning, other: other, now: now, checkAt: now.Add(20 * time.Second)}},
		{"earlier unknown", answer{reason: reasonEarlierUnknown, other: other, why: "the destination's answer: pending"}},
		{"earlier unknown, settled by its own resend", answer{reason: reasonEarlierUnknown, other: other, why: "no reconciler can ask the destination, and its own request, sent again, settles it", resends: true}},
		{"earlier applied", answer{reason: reasonEarlierApplied, other: done, result: result}},
		{"earlier done in place of another", answer{reason: reasonEarlierDone, other: done, result: result}},
		{"succeeded", answer{reason: reasonSucceeded, attempts: 1, result: result}},
		{"destination replayed", answer{reason: reasonDestinationReplayed, attempts: 1, result: result}},
		{"reconciled", answer{reason: reasonReconciled, attempts: 1, result: result}},
		{"settled applied", answer{reason: reasonSettledApplied, attempts: 1, result: result}},
		{"refused", answer{reason: reasonRefused, attempts: 1, err: errors.New("550 mailbox unavailable"), code: "mailbox_unavailable"}},
		{"awaits input", answer{reason: reasonAwaitsInput, attempts: 1, err: fmt.Errorf("the MCP tool book: %w (elicitation: \"Book seat 12A?\")", ErrAwaitsInput), code: "input_required"}},
		{"unknown", answer{reason: reasonUnknown, attempts: 1, err: cause}},
		{"unavailable", answer{reason: reasonUnavailable, attempts: 3, err: errors.New("503 service unavailable")}},
		{"lease lost", answer{reason: reasonLeaseLost, err: ErrLeaseLost}},
		{"key forgotten", answer{reason: reasonKeyForgotten, attempts: 1, created: now.Add(-25 * time.Hour)}},
		{"compensated", answer{reason: reasonCompensated, attempts: 1}},
		{"compensation failed", answer{reason: reasonCompensationFailed, attempts: 1, err: errors.New("the compensating action failed: refund refused")}},
	}
}

// Every answer a model can get, for every class, on one page
// (testdata/answers.golden): a change of wording is a reviewed diff. Run
// with -update to rewrite it.
func TestAnswers_Golden(t *testing.T) {
	var b strings.Builder
	seen := map[reason]bool{}
	for _, class := range []Class{Keyed, Reconcilable, AtMostOnce} {
		cfg := &config{Options: Options{Class: class, KeyPrefix: "send_email", Fence: FenceSession, DestinationKeyTTL: 24 * time.Hour}}
		cfg.identifyOrder = []string{"subject", "to"}
		cfg.defineTool("send_email", nil)
		tool := &Tool{name: "send_email", cfg: cfg}
		fmt.Fprintf(&b, "# %v\n\n", class)
		for _, s := range sampleAnswers() {
			seen[s.a.reason] = true
			env := tool.answerFor("send_email/this", s.a)
			if err := env.Validate(); err != nil {
				t.Errorf("%v, %s: the answer is not a valid envelope: %v\n%s", class, s.name, err, env)
			}
			fmt.Fprintf(&b, "## %s\nstatus: %s\n", s.name, env.Status)
			if env.Error != nil {
				fmt.Fprintf(&b, "code: %s\nmessage: %s\n", env.Error.Code, env.Error.Message)
			}
			if env.Earlier != nil {
				fmt.Fprintf(&b, "earlier: %s %s\n", env.Earlier.RequestRef, env.Earlier.State)
			}
			if env.RetryAfter > 0 {
				fmt.Fprintf(&b, "retry_after: %d\n", env.RetryAfter)
			}
			fmt.Fprintf(&b, "next: %s\nreplayed: %v\nreconciled: %v\n", env.Next, env.Replayed, env.Reconciled)
			if env.Note != "" {
				fmt.Fprintf(&b, "note: %s\n", env.Note)
			}
			b.WriteString("\n")
		}
	}
	for r := reasonMissingScope; r < reasonCount; r++ {
		if !seen[r] {
			t.Errorf("reason %d has no sample answer", r)
		}
	}
	const golden = "testdata/answers.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestAnswers_Golden -update to write it)", err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("the answers differ from %s; if the change is meant, run go test -run TestAnswers_Golden -update and review the diff.\n%s", golden, firstDiff(got, string(want)))
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n got:  %q\n want: %q", i+1, gl, wl)
		}
	}
	return ""
}
