package otelhooks_test

import (
	"context"
	"strconv"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/otelhooks"
)

// BenchmarkHooks compares, in one run, a guarded call with no hooks, with
// the OpenTelemetry hooks on no-op providers (what an application pays
// when it wires them but samples nothing), and on the SDK with every span
// recorded. Each call is a new action on memstore. hook_ns/call is the
// difference to the call without hooks.
func BenchmarkHooks(b *testing.B) {
	noop, err := otelhooks.New(otelhooks.Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		b.Fatal(err)
	}
	var base float64
	for _, bc := range []struct {
		name  string
		hooks func(b *testing.B) agenttool.Hooks
	}{
		{"none", func(*testing.B) agenttool.Hooks { return agenttool.Hooks{} }},
		{"otel_noop", func(*testing.B) agenttool.Hooks { return noop }},
		{"otel_sdk", func(b *testing.B) agenttool.Hooks { return newTelemetry(b).hooks(b) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tool, _ := newTool(b, bc.hooks(b), agenttool.Options{})
			ctx := scoped(context.Background())
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				tool.Invoke(ctx, `{"to":"u`+strconv.Itoa(i)+`@example.com","body":"hi"}`)
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if bc.name == "none" {
				base = ns
			} else if base > 0 {
				b.ReportMetric(ns-base, "hook_ns/call")
			}
		})
	}
}
