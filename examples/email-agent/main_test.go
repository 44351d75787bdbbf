package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

func statuses(sum demo.Summary) []envelope.Status {
	var out []envelope.Status
	for _, e := range sum.Envelopes {
		out = append(out, e.Status)
	}
	return out
}

func TestFaults(t *testing.T) {
	tests := []struct {
		fault   string
		effects int
		want    []envelope.Status
		codes   []string
	}{
		{"lost-ack", 1, []envelope.Status{envelope.UnknownOutcome, envelope.DefiniteFailure, envelope.Success},
			[]string{envelope.CodeOutcomeUnknown, envelope.CodeModelSuppliedKey, ""}},
		{"none", 1, []envelope.Status{envelope.Success}, []string{""}},
		{"bad-recipient", 0, []envelope.Status{envelope.DefiniteFailure}, []string{"smtp_550"}},
		{"reword", 1, []envelope.Status{envelope.UnknownOutcome, envelope.DefiniteFailure},
			[]string{envelope.CodeOutcomeUnknown, envelope.CodeEarlierApplied}},
		{"index-down", 1, []envelope.Status{envelope.UnknownOutcome, envelope.DefiniteFailure, envelope.UnknownOutcome, envelope.UnknownOutcome},
			[]string{envelope.CodeOutcomeUnknown, envelope.CodeModelSuppliedKey, envelope.CodeOutcomeUnknown, envelope.CodeOutcomeUnknown}},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			var out bytes.Buffer
			sum, err := demo.Run(context.Background(), example, []string{"-fault", tt.fault}, &out, os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Effects != tt.effects || !slices.Equal(statuses(sum), tt.want) {
				t.Fatalf("effects %d, statuses %v; want %d, %v\n%s", sum.Effects, statuses(sum), tt.effects, tt.want, out.String())
			}
			for i, e := range sum.Envelopes {
				code := ""
				if e.Error != nil {
					code = e.Error.Code
				}
				if code != tt.codes[i] {
					t.Errorf("envelope %d has code %q, want %q", i, code, tt.codes[i])
				}
			}
			wantLine := map[int]string{0: "mailbox: 0 messages\n", 1: "mailbox: 1 message\n"}[tt.effects]
			if !strings.HasSuffix(out.String(), wantLine) {
				t.Errorf("transcript does not end with %q:\n%s", wantLine, out.String())
			}
		})
	}
}

func TestJSONAndHelp(t *testing.T) {
	var out bytes.Buffer
	if _, err := demo.Run(context.Background(), example, []string{"-json"}, &out, os.Getenv); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], `{"example":"email-agent","fault":"lost-ack","effects":1,"envelopes":[`) {
		t.Errorf("-json printed:\n%s", out.String())
	}
	out.Reset()
	demo.Run(context.Background(), example, []string{"-h"}, &out, os.Getenv)
	for _, f := range []string{"lost-ack", "none", "bad-recipient", "reword", "index-down", "-llm", "-db", "-json", "-console"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("-h does not mention %s:\n%s", f, out.String())
		}
	}
	if _, err := demo.Run(context.Background(), example, []string{"-fault", "meteor"}, &out, os.Getenv); err == nil || !strings.Contains(err.Error(), "choose one of lost-ack, none, bad-recipient, reword, index-down") {
		t.Errorf("unknown fault: %v", err)
	}
}
