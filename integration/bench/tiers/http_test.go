package tiers

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agent-reach/agentreach/dispatcher/tracing"
)

// TestTracingSwitch checks the switch the http scenario measures tracing
// with: off, tracing.Enabled says so, as in a process that never
// installed a provider; on again, it traces.
func TestTracingSwitch(t *testing.T) {
	if tracing.Enabled() {
		t.Fatal("tracing is on before the switch was used")
	}
	tp := sdktrace.NewTracerProvider()
	switchTracing(tp)
	if !tracing.Enabled() {
		t.Fatal("off after switch on")
	}
	switchTracing(nil)
	if tracing.Enabled() {
		t.Fatal("on after switch off")
	}
	switchTracing(tp)
	if !tracing.Enabled() {
		t.Fatal("off after second switch on")
	}
	switchTracing(nil)
	_ = tp.Shutdown(t.Context())
}
