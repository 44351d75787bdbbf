package dbostool_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/dbostool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
)

// newTool builds a tool of class with o, over a memory store: New only
// reads its settings.
func newTool(t *testing.T, class agenttool.Class, o agenttool.Options) *agenttool.Tool {
	t.Helper()
	o.Class = class
	if class != agenttool.ReadOnly {
		o.Store = memstore.New()
	}
	tool, err := agenttool.New("send_email", "Send an email.", func(context.Context, email) (string, error) { return "sent", nil }, o)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// New refuses what would break a promise or could not work, and says
// what to change; it takes what is consistent.
func TestNewRefusesBadConfiguration(t *testing.T) {
	// A tool that fits: it outwaits a dead process's lease (15s plus 1s).
	fits := agenttool.Options{Lease: 15 * time.Second, WaitTimeout: 20 * time.Second}
	oneAttempt := agenttool.Options{Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
	for _, tc := range []struct {
		name  string
		class agenttool.Class
		tool  agenttool.Options
		opts  *dbostool.Options
		is    error    // nil: New accepts
		words []string // the message says
	}{
		{"a tool that fits, defaults", agenttool.Keyed, fits, nil, nil, nil},
		{"a read-only tool holds nothing", agenttool.ReadOnly, agenttool.Options{}, nil, nil, nil},
		{"DBOS owns the retries and outwaits the lease", agenttool.AtMostOnce, oneAttempt,
			&dbostool.Options{StepRetries: 20}, nil, nil},
		{"by input", agenttool.Keyed, fits, &dbostool.Options{Identity: dbostool.ByInput}, nil, nil},

		{"a tool of agenttool's defaults: a recovered step outwaits any lease", agenttool.Keyed, agenttool.Options{}, nil, nil, nil},
		{"retries with two owners", agenttool.Keyed, fits, &dbostool.Options{StepRetries: 3},
			dbostool.ErrRetriesMultiply, []string{"up to 4 times", "up to 3 attempts in each", "up to 12 attempts", "Retry.MaxAttempts 1", "StepRetries 0"}},
		{"retries with two owners, read-only", agenttool.ReadOnly, agenttool.Options{}, &dbostool.Options{StepRetries: 1},
			dbostool.ErrRetriesMultiply, []string{"choose one owner"}},
		{"negative retries", agenttool.Keyed, fits, &dbostool.Options{StepRetries: -1},
			dbostool.ErrInvalidOptions, []string{"StepRetries -1 is negative"}},
		{"a backoff without retries", agenttool.Keyed, fits, &dbostool.Options{StepBaseInterval: time.Second},
			dbostool.ErrInvalidOptions, []string{"StepRetries is 0"}},
		{"a shrinking backoff", agenttool.Keyed, oneAttempt, &dbostool.Options{StepRetries: 20, StepBackoffFactor: 0.5},
			dbostool.ErrInvalidOptions, []string{"StepBackoffFactor 0.5 is below 1"}},
		{"an unknown identity", agenttool.Keyed, fits, &dbostool.Options{Identity: 9},
			dbostool.ErrInvalidOptions, []string{"unknown Identity 9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dbostool.New(newTool(t, tc.class, tc.tool), tc.opts)
			if tc.is == nil {
				if err != nil {
					t.Fatalf("New refused: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.is) || !errors.Is(err, dbostool.ErrInvalidOptions) {
				t.Fatalf("New answered %v, want %v", err, tc.is)
			}
			for _, w := range append(tc.words, `tool "send_email"`) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
		})
	}
	if _, err := dbostool.New(nil, nil); !errors.Is(err, dbostool.ErrInvalidOptions) {
		t.Errorf("New(nil) answered %v", err)
	}
}

// A call trusted code got wrong is refused before any step runs: no
// principal, or a field its Step's identity does not use.
func TestRunRefusesBadCalls(t *testing.T) {
	fits := agenttool.Options{Lease: 15 * time.Second, WaitTimeout: 20 * time.Second}
	byStep, err := dbostool.New(newTool(t, agenttool.Keyed, fits), nil)
	if err != nil {
		t.Fatal(err)
	}
	byInput, err := dbostool.New(newTool(t, agenttool.Keyed, fits), &dbostool.Options{Identity: dbostool.ByInput})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    *dbostool.Step
		call dbostool.Call
		says string
	}{
		{"no principal", byStep, dbostool.Call{Args: toAna}, "no Principal"},
		{"no principal, by input", byInput, dbostool.Call{Args: toAna, Session: "c-9"}, "no Principal"},
		{"a session by step", byStep, dbostool.Call{Principal: "u-7", Args: toAna, Session: "c-9"}, "Session is for ByInput"},
		{"a named step by input", byInput, dbostool.Call{Principal: "u-7", Args: toAna, Step: "invoice"}, "Step is for ByStep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No workflow is needed: the call is refused first.
			if _, err := tc.s.Run(nil, tc.call); !errors.Is(err, dbostool.ErrInvalidCall) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Run answered %v, want %v saying %q", err, dbostool.ErrInvalidCall, tc.says)
			}
			if _, err := tc.s.Go(nil, tc.call); !errors.Is(err, dbostool.ErrInvalidCall) {
				t.Errorf("Go answered %v, want %v", err, dbostool.ErrInvalidCall)
			}
		})
	}
}
