package engine

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/tracing"
	"github.com/agent-reach/agentreach/streams"
)

// BenchmarkTracingOff is what tracing costs a task and its delivery when
// no SDK is installed (the global no-op tracer): with and without a
// caller's traceparent.
func BenchmarkTracingOff(b *testing.B) {
	d := &Engine{}
	for _, tc := range []struct {
		name   string
		header nats.Header
	}{
		{"no traceparent", nats.Header{}},
		{"traceparent", nats.Header{streams.HeaderTraceParent: []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			t := &Task{req: &nats.Msg{Header: tc.header}, capability: "echo", requestID: "r"}
			dl := &delivery{t: t}
			for b.Loop() {
				d.TraceTask(t)
				d.traceDelivery(dl, tc.header)
				tracing.End(dl.span, nil)
				tracing.End(t.span, nil)
			}
		})
	}
}

// TestTracingOffLeavesTheTraceparent: without an SDK a delivery carries the
// caller's traceparent unchanged, and a task without one gets none.
func TestTracingOffLeavesTheTraceparent(t *testing.T) {
	d := &Engine{}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, in := range []string{"", tp} {
		h := nats.Header{}
		if in != "" {
			h.Set(streams.HeaderTraceParent, in)
		}
		tk := &Task{req: &nats.Msg{Header: h}, capability: "echo", requestID: "r"}
		d.TraceTask(tk)
		dl := &delivery{t: tk}
		d.traceDelivery(dl, h)
		if got := h.Get(streams.HeaderTraceParent); got != in || dl.span != nil {
			t.Errorf("traceparent %q became %q (delivery span %v)", in, got, dl.span)
		}
		tracing.End(tk.span, nil)
	}
}
