package observe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/observe"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

type note struct {
	To   string `json:"to"`
	Body string `json:"body"`
}

// Log writes one record per outcome at INFO, or WARN for an unknown
// outcome, and one per fenced call at WARN, with the shared attribute
// names; DEBUG records only when asked for.
func TestLogLevelsAndAttributes(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	lost := errors.New("read tcp 127.0.0.1:25: connection reset by peer")
	tool, err := agenttool.New("send_note", "", func(ctx context.Context, n note) (string, error) {
		if n.To == "lost" {
			return "", lost
		}
		return "ok", nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Hooks: observe.Log(logger),
		Reconciler: reconcile.Func(func(context.Context, string) reconcile.Answer { return reconcile.StillPending() }),
		Retry:      agenttool.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := agenttool.WithScope(context.Background(), "tenant-1", "c-1")
	tool.Invoke(ctx, `{"to":"ok","body":"a"}`)
	tool.Invoke(ctx, `{"to":"lost","body":"b"}`)
	tool.Invoke(ctx, `{"to":"lost","body":"c"}`)

	var records []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		records = append(records, r)
	}
	var got []string
	for _, r := range records {
		got = append(got, r["level"].(string)+" "+r["msg"].(string)+" "+str(r[observe.Status])+str(r[observe.ErrorType]))
	}
	want := []string{
		"INFO retrysafe: call success",
		"INFO retrysafe: reconcile ",
		"WARN retrysafe: call unknown_outcomeoutcome_unknown",
		"INFO retrysafe: reconcile ",
		"WARN retrysafe: held back by an earlier action ",
		"WARN retrysafe: call unknown_outcomeearlier_action_unknown",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	first := records[0]
	if first[observe.ToolName] != "send_note" || first[observe.Class] != "reconcilable" || first[observe.RequestRef] == nil {
		t.Errorf("outcome record %v", first)
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// Join calls each hook in order and passes a Start's context on.
func TestJoin(t *testing.T) {
	type key struct{}
	var order []string
	a := agenttool.Hooks{
		Start: func(ctx context.Context, e agenttool.StartEvent) context.Context {
			order = append(order, "a.start")
			return context.WithValue(ctx, key{}, "from a")
		},
		Outcome: func(ctx context.Context, e agenttool.OutcomeEvent) { order = append(order, "a.outcome") },
	}
	b := agenttool.Hooks{
		Start: func(ctx context.Context, e agenttool.StartEvent) context.Context {
			order = append(order, "b.start:"+ctx.Value(key{}).(string))
			return nil // keeps the context
		},
		Outcome: func(ctx context.Context, e agenttool.OutcomeEvent) {
			order = append(order, "b.outcome:"+ctx.Value(key{}).(string))
		},
	}
	j := observe.Join(a, agenttool.Hooks{}, b)
	if j.Retry != nil {
		t.Errorf("Join set a hook nobody gave")
	}
	ctx := j.Start(context.Background(), agenttool.StartEvent{Tool: "t"})
	j.Outcome(ctx, agenttool.OutcomeEvent{Envelope: envelope.Envelope{Status: envelope.Success}})
	if got := strings.Join(order, ","); got != "a.start,b.start:from a,a.outcome,b.outcome:from a" {
		t.Errorf("order %s", got)
	}
}

// An error code a destination chose reaches the log shown, not obeyed:
// control characters (C0 and C1) and bidi overrides in it are written as
// escapes, whatever the handler (slog's JSON handler escapes only C0).
func TestLogShowsControlCharactersInsteadOfObeyingThem(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	tool, err := agenttool.New("send_note", "", func(ctx context.Context, n note) (string, error) {
		return "", envelope.MarkDefinite(errors.New("declined"), "declined\u009b31m\u009d0;owned\u009c\u202egnp")
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Hooks: observe.Log(logger)})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-1", "c-1"), `{"to":"ana","body":"a"}`)
	if env.Status != envelope.DefiniteFailure {
		t.Fatalf("the call: %s", env)
	}
	log := buf.String()
	for i, r := range log {
		if r < 0x20 && r != '\n' || r >= 0x7f && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			t.Fatalf("the log carries %U at byte %d:\n%q", r, i, log)
		}
	}
	if !strings.Contains(log, `"error.type":"declined\\u009b31m\\u009d0;owned\\u009c\\u202egnp"`) {
		t.Errorf("the log does not show the error code visibly:\n%s", log)
	}
}
