package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
)

// Each fault ends with one booking, and -json prints it with every
// envelope: the unknown outcome, the reworded copy held back, the resend
// that settles it.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		fault    string
		statuses []envelope.Status
	}{
		{"lose-reply", []envelope.Status{envelope.UnknownOutcome, envelope.UnknownOutcome, envelope.Success}},
		{"none", []envelope.Status{envelope.Success}},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			var out bytes.Buffer
			if _, err := run(context.Background(), []string{"-fault", tc.fault, "-json"}, &out); err != nil {
				t.Fatal(err)
			}
			var sum Summary
			if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
				t.Fatalf("-json printed %q: %v", out.String(), err)
			}
			if sum.Effects != 1 {
				t.Errorf("%d bookings, want 1: %s", sum.Effects, out.String())
			}
			var got []envelope.Status
			for _, e := range sum.Envelopes {
				got = append(got, e.Status)
			}
			if len(got) != len(tc.statuses) {
				t.Fatalf("envelopes %v, want %v", got, tc.statuses)
			}
			for i := range got {
				if got[i] != tc.statuses[i] {
					t.Errorf("envelope %d: %s, want %s", i+1, sum.Envelopes[i], tc.statuses[i])
				}
			}
			if tc.fault == "lose-reply" && sum.Envelopes[1].Error.Code != envelope.CodeEarlierUnknown {
				t.Errorf("the reworded copy: %s; want it held back", sum.Envelopes[1])
			}
		})
	}
	var out bytes.Buffer
	if _, err := run(context.Background(), nil, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.String(), "bookings: 1\n") {
		t.Errorf("the transcript does not end with the booking count:\n%s", out.String())
	}
}
