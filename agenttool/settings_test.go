package agenttool_test

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
)

func TestSettingsAreWhatTheToolRunsWith(t *testing.T) {
	tool, err := agenttool.New("send", "Send.", func(ctx context.Context, in struct {
		To string `json:"to"`
	}) (string, error) {
		return "ok", nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, AttemptTimeout: 3 * time.Second, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	s := tool.Settings()
	if s.Class != agenttool.Keyed || s.AttemptTimeout != 3*time.Second || s.Retry.MaxAttempts != 1 {
		t.Errorf("settings %+v do not say what the tool was given", s)
	}
	// Defaults are applied, so that an adapter compares real figures.
	if s.Lease != time.Minute || s.WaitTimeout != 10*time.Second || s.Retry.MaxElapsed != 15*time.Second || s.Fence != agenttool.FenceSession {
		t.Errorf("settings %+v do not carry the defaults", s)
	}
	// An attempt's request may land until its timeout, the late window
	// (none) and the default clock skew have passed after it ended.
	if got := s.InFlight(); got != 3*time.Second+time.Second {
		t.Errorf("InFlight() = %v, want 4s", got)
	}
}
