package main

import (
	"context"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/otelhooks"
)

// guardTelemetry returns the hooks that send the guard's spans (a span per
// guarded call, as agenttool/otelhooks makes them) to an OpenTelemetry
// collector over OTLP/HTTP, when the environment names one as
// OpenTelemetry's own variables do (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, with OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_SERVICE_NAME and the like); otherwise none. stop flushes what is
// still buffered.
func guardTelemetry(ctx context.Context) (hooks agenttool.Hooks, stop func(), err error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return agenttool.Hooks{}, func() {}, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return agenttool.Hooks{}, nil, err
	}
	// The environment's service name and attributes win over the default.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "retrysafe-guard")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return agenttool.Hooks{}, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	stop = func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		tp.Shutdown(ctx)
	}
	if hooks, err = otelhooks.New(otelhooks.Options{TracerProvider: tp}); err != nil {
		stop()
		return agenttool.Hooks{}, nil, err
	}
	return hooks, stop, nil
}
