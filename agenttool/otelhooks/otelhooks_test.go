package otelhooks_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/observe"
	"github.com/retrysafe/retrysafe/agenttool/otelhooks"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// telemetry is an SDK that keeps what it records.
type telemetry struct {
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
	tp      *sdktrace.TracerProvider
	opts    otelhooks.Options
}

func newTelemetry(t testing.TB) *telemetry {
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { tp.Shutdown(context.Background()); mp.Shutdown(context.Background()) })
	return &telemetry{spans: spans, metrics: reader, tp: tp, opts: otelhooks.Options{TracerProvider: tp, MeterProvider: mp}}
}

func (tm *telemetry) hooks(t testing.TB) agenttool.Hooks {
	h, err := otelhooks.New(tm.opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// caller starts the caller's span, as an agent framework's run would.
func (tm *telemetry) caller(ctx context.Context) (context.Context, trace.Span) {
	return tm.tp.Tracer("agent").Start(ctx, "agent run")
}

// toolSpans returns the ended spans this package made.
func (tm *telemetry) toolSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if strings.HasPrefix(s.Name(), "execute_tool") {
			out = append(out, s)
		}
	}
	return out
}

// points returns the metric data points by metric name, each as its
// attributes and value.
func (tm *telemetry) points(t *testing.T) map[string][]point {
	var rm metricdata.ResourceMetrics
	if err := tm.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{p.Attributes, float64(p.Value)})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{p.Attributes, float64(p.Count)})
				}
			}
		}
	}
	return out
}

type point struct {
	attrs attribute.Set
	value float64 // a sum's value, a histogram's count
}

func (p point) get(key string) string {
	v, _ := p.attrs.Value(attribute.Key(key))
	return v.String()
}

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func events(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

type email struct {
	To   string `json:"to"`
	Body string `json:"body"`
}

// mailbox is a destination scripted by recipient: "fail@…" is refused,
// "lost@…" is delivered with its reply lost, "slow@…" takes a while.
type mailbox struct {
	mu   sync.Mutex
	sent []string
}

func (m *mailbox) send(ctx context.Context, e email) (string, error) {
	switch {
	case strings.HasPrefix(e.To, "fail"):
		return "", envelope.MarkDefinite(errors.New("550 no such user"), "smtp_550")
	case strings.HasPrefix(e.To, "slow"):
		time.Sleep(50 * time.Millisecond)
	}
	m.mu.Lock()
	m.sent = append(m.sent, agenttool.RequestRef(ctx))
	m.mu.Unlock()
	if strings.HasPrefix(e.To, "lost") {
		return "", errors.New("read tcp 127.0.0.1:25: connection reset by peer")
	}
	return "queued", nil
}

func newTool(t testing.TB, hooks agenttool.Hooks, opts agenttool.Options) (*agenttool.Tool, *mailbox) {
	t.Helper()
	m := &mailbox{}
	if opts.Store == nil {
		opts.Store = memstore.New()
	}
	if opts.Class == 0 {
		opts.Class = agenttool.Keyed
	}
	opts.Hooks = hooks
	opts.Retry = agenttool.RetryPolicy{MaxAttempts: 1}
	tool, err := agenttool.New("send_email", "Send an email.", m.send, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tool, m
}

func scoped(ctx context.Context) context.Context {
	return agenttool.WithScope(ctx, "tenant-1/user-1", "conversation-1")
}

// One test per kind of outcome: the span's name, kind, parent and
// attributes, and the metric points.
func TestSpansAndMetricsByOutcome(t *testing.T) {
	type want struct {
		status, errorType string
		replayed          bool
		reconciled        bool
		events            []string
	}
	cases := []struct {
		name  string
		opts  agenttool.Options
		calls []string // the last one is checked
		want  want
	}{
		{name: "success", calls: []string{`{"to":"ana@example.com","body":"hi"}`},
			want: want{status: "success"}},
		{name: "replay", calls: []string{`{"to":"ana@example.com","body":"hi"}`, `{"body":"hi","to":"ana@example.com"}`},
			want: want{status: "success", replayed: true}},
		{name: "definite failure", calls: []string{`{"to":"fail@example.com","body":"hi"}`},
			want: want{status: "definite_failure", errorType: "smtp_550"}},
		{name: "unknown", opts: agenttool.Options{Class: agenttool.AtMostOnce}, calls: []string{`{"to":"lost@example.com","body":"hi"}`},
			want: want{status: "unknown_outcome", errorType: "outcome_unknown"}},
		{name: "reconciled", opts: agenttool.Options{Class: agenttool.Reconcilable, Reconciler: reconcile.Func(func(context.Context, string) reconcile.Answer {
			return reconcile.AppliedWith([]byte(`"queued"`))
		})}, calls: []string{`{"to":"lost@example.com","body":"hi"}`},
			want: want{status: "success", reconciled: true, events: []string{"retrysafe.reconcile"}}},
		{name: "fenced", opts: agenttool.Options{Class: agenttool.Reconcilable, Reconciler: reconcile.Func(func(context.Context, string) reconcile.Answer {
			return reconcile.StillPending()
		})}, calls: []string{`{"to":"lost@example.com","body":"hi"}`, `{"to":"lost@example.com","body":"hi, reworded"}`},
			want: want{status: "unknown_outcome", errorType: "earlier_action_unknown", events: []string{"retrysafe.reconcile", "retrysafe.fenced"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tm := newTelemetry(t)
			tool, _ := newTool(t, tm.hooks(t), tc.opts)
			ctx, parent := tm.caller(scoped(context.Background()))
			var env envelope.Envelope
			for _, in := range tc.calls {
				env = tool.Invoke(ctx, in)
			}
			parent.End()
			spans := tm.toolSpans()
			if len(spans) != len(tc.calls) {
				t.Fatalf("%d tool spans for %d calls", len(spans), len(tc.calls))
			}
			s := spans[len(spans)-1]
			if s.Name() != "execute_tool send_email" || s.SpanKind() != trace.SpanKindInternal {
				t.Errorf("span %q of kind %v", s.Name(), s.SpanKind())
			}
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("the span's parent is not the caller's span")
			}
			a := attrs(s)
			for k, v := range map[string]string{
				"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "send_email",
				"retrysafe.status": tc.want.status, "retrysafe.next": string(env.Next),
				"retrysafe.request_ref": env.RequestRef, "retrysafe.attempts": fmt.Sprint(env.Attempts),
				"retrysafe.replayed": fmt.Sprint(tc.want.replayed), "retrysafe.reconciled": fmt.Sprint(tc.want.reconciled),
			} {
				if a[k] != v {
					t.Errorf("attribute %s = %q, want %q", k, a[k], v)
				}
			}
			if a["error.type"] != tc.want.errorType {
				t.Errorf("error.type = %q, want %q", a["error.type"], tc.want.errorType)
			}
			if failed := s.Status().Code == codes.Error; failed != (tc.want.errorType != "") {
				t.Errorf("span status %v, error.type %q", s.Status(), tc.want.errorType)
			}
			got := events(s)
			for _, e := range tc.want.events {
				if !strings.Contains(strings.Join(got, ","), e) {
					t.Errorf("events %v, want %s", got, e)
				}
			}

			pts := tm.points(t)
			var last point
			calls := 0.0
			for _, p := range pts["retrysafe.call.duration"] {
				calls += p.value
				if p.get("retrysafe.status") == tc.want.status && p.get("retrysafe.replayed") == fmt.Sprint(tc.want.replayed) {
					last = p
				}
			}
			if calls != float64(len(tc.calls)) || last.value == 0 || last.get("gen_ai.tool.name") != "send_email" {
				t.Errorf("retrysafe.call.duration: %d calls recorded, want %d, with one of status %s: %+v", int(calls), len(tc.calls), tc.want.status, pts["retrysafe.call.duration"])
			}
			replays := 0.0
			for _, p := range pts["retrysafe.replays"] {
				replays += p.value
			}
			if (replays > 0) != tc.want.replayed {
				t.Errorf("retrysafe.replays = %v; replayed %v", replays, tc.want.replayed)
			}
		})
	}
}

// A call that waits for another call holding its key says so.
func TestWaitedIsAnEvent(t *testing.T) {
	tm := newTelemetry(t)
	tool, m := newTool(t, tm.hooks(t), agenttool.Options{})
	ctx, parent := tm.caller(scoped(context.Background()))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { tool.Invoke(ctx, `{"to":"slow@example.com","body":"hi"}`) })
	}
	wg.Wait()
	parent.End()
	waited := 0
	for _, s := range tm.toolSpans() {
		if strings.Contains(strings.Join(events(s), ","), "retrysafe.waited") {
			waited++
		}
	}
	if len(m.sent) != 1 || waited != 1 {
		t.Errorf("%d emails; %d spans with a wait; want 1 and 1", len(m.sent), waited)
	}
}

// When the caller's span is already a tool span, the call adds its
// attributes to it rather than nesting a second one; a guarded call inside
// a guarded tool nests under the outer call's span.
func TestFrameworkToolSpanIsReused(t *testing.T) {
	tm := newTelemetry(t)
	tool, _ := newTool(t, tm.hooks(t), agenttool.Options{})
	ctx, framework := tm.tp.Tracer("framework").Start(scoped(context.Background()), "execute_tool send_email")
	env := tool.Invoke(ctx, `{"to":"ana@example.com","body":"hi"}`)
	framework.End()
	spans := tm.toolSpans()
	if len(spans) != 1 || attrs(spans[0])["retrysafe.request_ref"] != env.RequestRef {
		t.Fatalf("%d tool spans; want the framework's alone, with the call's attributes", len(spans))
	}

	outer, err := agenttool.New("plan_trip", "Plan.", func(ctx context.Context, in email) (string, error) {
		return string(tool.Invoke(ctx, `{"to":"bo@example.com","body":"hi"}`).Status), nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Hooks: tm.hooks(t)})
	if err != nil {
		t.Fatal(err)
	}
	outer.Invoke(scoped(context.Background()), `{"to":"x@example.com","body":"go"}`)
	var inner, plan sdktrace.ReadOnlySpan
	for _, s := range tm.toolSpans() {
		switch s.Name() {
		case "execute_tool plan_trip":
			plan = s
		case "execute_tool send_email":
			inner = s
		}
	}
	if plan == nil || inner == nil || inner.Parent().SpanID() != plan.SpanContext().SpanID() {
		t.Errorf("the inner call's span is not a child of the outer call's")
	}
}

// The unknown-records counter reads the store.
func TestObserveUnknown(t *testing.T) {
	tm := newTelemetry(t)
	store := memstore.New()
	if err := otelhooks.ObserveUnknown(store, tm.opts); err != nil {
		t.Fatal(err)
	}
	tool, _ := newTool(t, agenttool.Hooks{}, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
	tool.Invoke(scoped(context.Background()), `{"to":"lost@example.com","body":"hi"}`)
	pts := tm.points(t)["retrysafe.unknown_records"]
	if len(pts) != 1 || pts[0].value != 1 {
		t.Errorf("retrysafe.unknown_records: %+v, want 1", pts)
	}
}

// No span, event, metric point or log record carries the principal, the
// session or an input value.
func TestNoScopeOrInputIsRecorded(t *testing.T) {
	const principal, session, input = "CANARY-PRINCIPAL-71", "CANARY-SESSION-72", "CANARY-INPUT-73"
	tm := newTelemetry(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hooks := observe.Join(tm.hooks(t), observe.Log(logger))
	reconciler := reconcile.Func(func(context.Context, string) reconcile.Answer { return reconcile.StillPending() })
	store := memstore.New()
	if err := otelhooks.ObserveUnknown(store, tm.opts); err != nil {
		t.Fatal(err)
	}
	tool, _ := newTool(t, hooks, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: reconciler})
	ctx, parent := tm.caller(agenttool.WithScope(context.Background(), principal, session))
	for _, to := range []string{"ana", "fail", "lost", "lost", "slow"} {
		tool.Invoke(ctx, fmt.Sprintf(`{"to":"%s@example.com","body":%q}`, to, input))
		tool.Invoke(ctx, fmt.Sprintf(`{"to":"%s@example.com","body":%q}`, to, input+" reworded"))
	}
	parent.End()

	var recorded strings.Builder
	for _, s := range tm.spans.Ended() {
		fmt.Fprintln(&recorded, s.Name(), s.Attributes(), s.Status())
		for _, e := range s.Events() {
			fmt.Fprintln(&recorded, e.Name, e.Attributes)
		}
	}
	for name, pts := range tm.points(t) {
		for _, p := range pts {
			fmt.Fprintln(&recorded, name, p.attrs.Encoded(attribute.DefaultEncoder()))
		}
	}
	recorded.Write(logs.Bytes())
	if recorded.Len() < 1000 || !strings.Contains(recorded.String(), "retrysafe.status") {
		t.Fatalf("too little was recorded to be searched:\n%s", recorded.String())
	}
	for _, canary := range []string{principal, session, input} {
		if strings.Contains(recorded.String(), canary) {
			t.Errorf("%s was recorded", canary)
		}
	}
}
