// Package otelhooks reports guarded calls to OpenTelemetry: a span per call
// and metrics, through [agenttool.Hooks]. It uses the OpenTelemetry API
// only; the application chooses and configures the SDK.
//
// Spans follow the semantic conventions for generative AI tool execution:
// each call is a span "execute_tool {tool name}" of kind internal, a child
// of the caller's span, with gen_ai.operation.name = execute_tool,
// gen_ai.tool.name, and error.type set to the envelope's error code when the
// call did not succeed. When the caller's span is already a tool span (a
// framework made one), the call adds its attributes to it instead of
// nesting a second one ([Options.ToolSpan]). retrysafe's own attributes
// are under "retrysafe." (see package agenttool/observe for the names):
// status, next, class, request_ref (spans only), attempts, replayed,
// reconciled and the last reconcile verdict; retries, checks, fenced calls,
// waits for another call and approvals are span events.
//
// Metrics:
//
//	retrysafe.call.duration   histogram, s: calls by tool, status and replayed (its count is calls by status)
//	retrysafe.attempts        counter: attempts of tools, by tool and outcome class
//	retrysafe.replays         counter: calls answered from a recorded outcome, by tool
//	                          (replays counted apart from business events)
//	retrysafe.reconciles      counter: destination checks, by tool, verdict and who asked
//	retrysafe.unknown_records up-down counter, observed from the store ([ObserveUnknown])
//
// Nothing carries the principal, the session, input values, results or
// error messages.
package otelhooks

import (
	"context"
	"errors"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/observe"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
)

// ScopeName is the instrumentation scope of the spans and metrics.
const ScopeName = "github.com/retrysafe/retrysafe/agenttool/otelhooks"

// Options configure [New] and [ObserveUnknown]. The zero value uses the
// global providers.
type Options struct {
	TracerProvider trace.TracerProvider // nil: otel.GetTracerProvider()
	MeterProvider  metric.MeterProvider // nil: otel.GetMeterProvider()
	// ToolSpan reports whether the span on a call's context is already a
	// tool span that the call should add its attributes to. nil: a
	// recording span whose name starts with "execute_tool" (as the SDK's
	// spans tell), unless this package made it for an enclosing call.
	ToolSpan func(ctx context.Context) bool
}

// ownedKey marks a context whose span this package started for a call; its
// value is the span.
type ownedKey struct{}

type hooks struct {
	// opts caches, by attribute values, the options that carry a metric
	// point's attributes: a metric's attributes take few values, and the
	// options are then made once, not on every call.
	opts       sync.Map // optKey → metric.MeasurementOption
	tracer     trace.Tracer
	toolSpan   func(context.Context) bool
	duration   metric.Float64Histogram
	attempts   metric.Int64Counter
	replays    metric.Int64Counter
	reconciles metric.Int64Counter
}

// New returns hooks that report calls as spans and metrics. Join them with
// others with observe.Join.
func New(opts Options) (agenttool.Hooks, error) {
	tp, mp := opts.TracerProvider, opts.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	h := &hooks{tracer: tp.Tracer(ScopeName), toolSpan: opts.ToolSpan}
	if h.toolSpan == nil {
		h.toolSpan = namedToolSpan
	}
	var err error
	if h.duration, err = meter.Float64Histogram("retrysafe.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of guarded tool calls, by tool and envelope status.")); err != nil {
		return agenttool.Hooks{}, err
	}
	if h.attempts, err = meter.Int64Counter("retrysafe.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of guarded tools, by tool and outcome class.")); err != nil {
		return agenttool.Hooks{}, err
	}
	if h.replays, err = meter.Int64Counter("retrysafe.replays", metric.WithUnit("{call}"),
		metric.WithDescription("Calls answered from a recorded outcome, without running the tool.")); err != nil {
		return agenttool.Hooks{}, err
	}
	if h.reconciles, err = meter.Int64Counter("retrysafe.reconciles", metric.WithUnit("{check}"),
		metric.WithDescription("Checks of destinations about actions whose outcome is unknown.")); err != nil {
		return agenttool.Hooks{}, err
	}
	return agenttool.Hooks{
		Start:     h.start,
		Outcome:   h.outcome,
		Attempt:   h.attempt,
		Replayed:  h.replayed,
		Reconcile: h.reconcile,
		Retry:     h.retry,
		Fenced:    h.fenced,
		Approval:  h.approval,
		Waited:    h.waited,
	}, nil
}

// namedToolSpan reports whether ctx's span is a recording tool span made by
// someone else.
func namedToolSpan(ctx context.Context) bool {
	s := trace.SpanFromContext(ctx)
	if !s.IsRecording() {
		return false
	}
	if owned(ctx, s) {
		return false // an enclosing guarded call's: nest under it
	}
	named, ok := s.(interface{ Name() string })
	return ok && strings.HasPrefix(named.Name(), observe.ExecuteTool)
}

// owned reports whether span is the one this package started for the call
// of ctx. Spans are told apart by their span contexts: a Span's dynamic type
// need not be comparable.
func owned(ctx context.Context, span trace.Span) bool {
	mine, ok := ctx.Value(ownedKey{}).(trace.Span)
	return ok && mine.SpanContext().Equal(span.SpanContext())
}

func (h *hooks) start(ctx context.Context, e agenttool.StartEvent) context.Context {
	attrs := []attribute.KeyValue{
		attribute.String(observe.OperationName, observe.ExecuteTool),
		attribute.String(observe.ToolName, e.Tool),
		attribute.String(observe.Class, observe.ClassValue(e.Class)),
	}
	if h.toolSpan(ctx) {
		trace.SpanFromContext(ctx).SetAttributes(attrs...)
		return ctx
	}
	ctx, span := h.tracer.Start(ctx, observe.ExecuteTool+" "+e.Tool,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, ownedKey{}, span)
}

func (h *hooks) outcome(ctx context.Context, e agenttool.OutcomeEvent) {
	env := e.Envelope
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String(observe.Status, string(env.Status)),
			attribute.String(observe.Next, string(env.Next)),
			attribute.String(observe.RequestRef, env.RequestRef),
			attribute.Int(observe.Attempts, env.Attempts),
			attribute.Bool(observe.Replayed, env.Replayed),
			attribute.Bool(observe.Reconciled, env.Reconciled),
		)
		if t := observe.ErrorTypeOf(env); t != "" {
			span.SetAttributes(attribute.String(observe.ErrorType, t))
			span.SetStatus(codes.Error, t)
		}
	}
	if owned(ctx, span) {
		span.End()
	}
	h.duration.Record(ctx, e.Duration.Seconds(), h.attrs(optKey{"duration", env.Tool, string(env.Status), observe.ErrorTypeOf(env), env.Replayed}))
}

type optKey struct {
	metric, tool, a, b string
	flag               bool
}

// attrs returns the option with the attributes of a metric point of k.
func (h *hooks) attrs(k optKey) metric.MeasurementOption {
	if o, ok := h.opts.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	kv := []attribute.KeyValue{attribute.String(observe.ToolName, k.tool)}
	switch k.metric {
	case "duration":
		kv = append(kv, attribute.String(observe.Status, k.a), attribute.Bool(observe.Replayed, k.flag))
		if k.b != "" {
			kv = append(kv, attribute.String(observe.ErrorType, k.b))
		}
	case "attempts":
		kv = append(kv, attribute.String("retrysafe.attempt.outcome", k.a))
	case "replays":
		kv = append(kv, attribute.String("retrysafe.state", k.a))
	case "reconciles":
		kv = append(kv, attribute.String(observe.Verdict, k.a), attribute.String(observe.By, k.b))
	}
	o, _ := h.opts.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return o.(metric.MeasurementOption)
}

func (h *hooks) attempt(ctx context.Context, e agenttool.AttemptEvent) {
	class := "success"
	if e.Err != nil {
		class = e.Class.String()
	}
	h.attempts.Add(ctx, 1, h.attrs(optKey{metric: "attempts", tool: e.Tool, a: class}))
}

func (h *hooks) replayed(ctx context.Context, e agenttool.ReplayedEvent) {
	h.replays.Add(ctx, 1, h.attrs(optKey{metric: "replays", tool: e.Tool, a: e.State.String()}))
}

func (h *hooks) reconcile(ctx context.Context, e agenttool.ReconcileEvent) {
	verdict := observe.VerdictValue(e.Verdict)
	by, _, _ := strings.Cut(e.By, ":") // operator:NAME counts as operator: names are people
	h.reconciles.Add(ctx, 1, h.attrs(optKey{metric: "reconciles", tool: e.Tool, a: verdict, b: by}))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String(observe.Verdict, verdict))
		span.AddEvent("retrysafe.reconcile", trace.WithAttributes(attribute.String(observe.Verdict, verdict), attribute.String(observe.By, by)))
	}
}

func (h *hooks) retry(ctx context.Context, e agenttool.RetryEvent) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("retrysafe.retry", trace.WithAttributes(attribute.Int(observe.Attempt, e.Attempt),
			attribute.String(observe.ErrorType, envelope.Classify(e.Err).String()), attribute.Float64(observe.Wait, e.Wait.Seconds())))
	}
}

func (h *hooks) fenced(ctx context.Context, e agenttool.FencedEvent) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("retrysafe.fenced", trace.WithAttributes(attribute.String(observe.Earlier, e.Earlier),
			attribute.String(observe.EarlierIs, string(e.EarlierState))))
	}
}

func (h *hooks) waited(ctx context.Context, e agenttool.WaitedEvent) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("retrysafe.waited", trace.WithAttributes(attribute.Float64(observe.Duration, e.Duration.Seconds()),
			attribute.Bool("retrysafe.wait.gave_up", e.GaveUp)))
	}
}

func (h *hooks) approval(ctx context.Context, e agenttool.ApprovalEvent) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		decision := e.Decision.String()
		if e.Err != nil {
			decision = "failed"
		}
		span.AddEvent("retrysafe.approval", trace.WithAttributes(attribute.String(observe.Decision, decision)))
	}
}

// ObserveUnknown registers retrysafe.unknown_records, an asynchronous
// up-down counter of the unknown records in store that await a settlement,
// read from the store at each collection (storekit.Counter.CountUnknown:
// its cost grows with the open records only). A value that keeps rising
// means destinations that are never asked, or never answer: a reconciler
// that fails, a sweeper that is not running, or people who are not told.
func ObserveUnknown(store agenttool.Store, opts Options) error {
	counter, ok := store.(storekit.Counter)
	if !ok {
		return errUncountable
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	_, err := mp.Meter(ScopeName).Int64ObservableUpDownCounter("retrysafe.unknown_records", metric.WithUnit("{record}"),
		metric.WithDescription("Actions whose outcome is unknown and not settled yet."),
		metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
			n, err := counter.CountUnknown(ctx)
			if err != nil {
				return err
			}
			o.Observe(int64(n))
			return nil
		}))
	return err
}

var errUncountable = errors.New("otelhooks: the store cannot count its unknown records (it does not implement storekit.Counter)")
