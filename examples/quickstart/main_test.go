package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
)

func TestQuickstartSendsOneEmail(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if !strings.Contains(text, "mailbox: 1 message\n") {
		t.Fatalf("transcript does not end with one message:\n%s", text)
	}
	var envs []envelope.Envelope
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "tool  ← "); ok {
			env, err := envelope.Parse([]byte(rest))
			if err != nil {
				t.Fatalf("tool output is not an envelope: %v\n%s", err, rest)
			}
			envs = append(envs, env)
		}
	}
	if len(envs) != 2 {
		t.Fatalf("%d envelopes, want 2:\n%s", len(envs), text)
	}
	if envs[0].Status != envelope.Success || envs[0].Attempts != 2 || envs[0].Replayed {
		t.Errorf("first envelope %s: want success after 2 attempts", envs[0])
	}
	if envs[1].Status != envelope.Success || !envs[1].Replayed || envs[1].RequestRef != envs[0].RequestRef {
		t.Errorf("second envelope %s: want the first replayed", envs[1])
	}
}
