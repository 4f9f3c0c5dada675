package tiers

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// The process's tracer provider delegates once: the tracers taken before
// it was first set (every package's, at init) go to the first provider
// set, for good. So the scenario installs a switch as that first one, and
// toggles the global provider between it and the unset default, which is
// what tracing.Enabled reads: off, nothing is traced at all, as in a
// process that never installed a provider.
var (
	unsetProvider = otel.GetTracerProvider()
	switched      atomic.Pointer[switchedTo]
)

// countingExporter is the in-process collector: it counts the spans it is
// sent and keeps none.
type countingExporter struct{ spans atomic.Int64 }

// ExportSpans counts spans.
func (c *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.spans.Add(int64(len(spans)))
	return nil
}

// Shutdown does nothing.
func (c *countingExporter) Shutdown(context.Context) error { return nil }

// switchedTo is the provider tracing goes to, with its tracers by name
// (a provider's Tracer takes a lock: asked once per name, not per span).
type switchedTo struct {
	tp      *sdktrace.TracerProvider
	tracers sync.Map // name → trace.Tracer
}

// switchTracing makes every span record into tp from now on; nil turns
// tracing off.
func switchTracing(tp *sdktrace.TracerProvider) {
	if tp == nil {
		switched.Store(nil)
		if otel.GetTracerProvider() != unsetProvider {
			otel.SetTracerProvider(unsetProvider)
		}
		return
	}
	switched.Store(&switchedTo{tp: tp})
	otel.SetTracerProvider(switchProvider{})
}

type switchProvider struct{ embedded.TracerProvider }

// Tracer returns a tracer that follows the switch.
func (switchProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return switchTracer{name: name, opts: opts}
}

type switchTracer struct {
	embedded.Tracer
	name string
	opts []trace.TracerOption
}

// Start starts a span with the switched-to provider's tracer, or the
// no-op tracer's.
func (t switchTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if to := switched.Load(); to != nil {
		tr, ok := to.tracers.Load(t.name)
		if !ok {
			tr, _ = to.tracers.LoadOrStore(t.name, to.tp.Tracer(t.name, t.opts...))
		}
		return tr.(trace.Tracer).Start(ctx, name, opts...)
	}
	return noop.Tracer{}.Start(ctx, name, opts...)
}
