package stack

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
)

// Tracing is off unless the standard OpenTelemetry environment asks for
// it: OTEL_TRACES_EXPORTER (otlp, console; none is off) or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and not
// OTEL_SDK_DISABLED=true. The exporter, its protocol, the sampler
// (OTEL_TRACES_SAMPLER) and the resource (OTEL_SERVICE_NAME, default
// agentreach; OTEL_RESOURCE_ATTRIBUTES) follow the same variables.

// tracingWanted reports whether the environment asks for traces.
func tracingWanted(lookup func(string) (string, bool)) bool {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := get("OTEL_TRACES_EXPORTER"); {
	case exp == "none":
		return false
	case exp != "":
		return true
	}
	return get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// tracerProvider returns the tracer provider the environment asks for,
// nil when tracing is off.
func tracerProvider(ctx context.Context, lookup func(string) (string, bool)) (*sdktrace.TracerProvider, error) {
	if !tracingWanted(lookup) {
		return nil, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing (OTEL_* environment): %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "agentreach")), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// startTracing installs the environment's tracer provider for the process
// and registers its shutdown (which flushes the last spans) with st. With
// tracing off it does nothing: every span is the global no-op tracer's.
func startTracing(ctx context.Context, st *cli.Stopper) error {
	tp, err := tracerProvider(ctx, os.LookupEnv)
	if err != nil || tp == nil {
		return err
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	st.Add("tracing", tp.Shutdown)
	return nil
}
