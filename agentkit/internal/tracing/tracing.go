// Package tracing holds agentkit's spans (OpenTelemetry, through the
// global API: until the process installs a tracer provider no span is
// started and the deliveries' traceparent passes on unchanged). A handler
// runs in a span "process reach.agent.{instance}", the child of the
// delivery's traceparent, and its ctx carries it: a call made with that
// ctx runs in a child span "send reach.task.<capability>" whose context
// is the next hop's traceparent.
package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agent-reach/agentreach/streams"
)

// Name is the instrumentation scope of agentkit's spans (agentkit.TracerName).
const Name = "github.com/agent-reach/agentreach/agentkit"

var tracer = otel.Tracer(Name)

// unset is the global tracer provider before any is installed: until the
// process installs one, no span is started at all.
var unset = otel.GetTracerProvider()

// Enabled reports whether the process has installed a tracer provider.
func Enabled() bool { return otel.GetTracerProvider() != unset }

// traceContext reads and writes W3C traceparent, the contract's header,
// whatever propagator the process installed globally.
var traceContext propagation.TraceContext

// Delivery is what a handler's span says of the delivery it handles.
type Delivery struct {
	// Destination is the agent's subject, its instance written {instance}.
	Destination string
	AgentType   string
	AgentID     string
	Capability  string
	Attempt     int
}

// StartProcess returns the context a handler of a delivery with headers h
// runs in: base, with the handler's span — also one the sampler dropped,
// so that calls from the handler are dropped alike — and that span when
// it records (nil when it does not).
func StartProcess(base context.Context, h nats.Header, d Delivery) (context.Context, trace.Span) {
	if !Enabled() {
		return base, nil
	}
	parent := base
	if h.Get(streams.HeaderTraceParent) != "" {
		parent = traceContext.Extract(parent, streams.HeaderCarrier(h))
	}
	ctx, span := tracer.Start(parent, "process", trace.WithSpanKind(trace.SpanKindConsumer))
	switch {
	case !span.SpanContext().IsValid():
		return base, nil
	case !span.IsRecording():
		return ctx, nil
	}
	span.SetName("process " + d.Destination)
	span.SetAttributes(
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.destination.name", d.Destination),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", d.AgentType),
		attribute.String("gen_ai.agent.id", d.AgentID),
		attribute.String("agentreach.capability", d.Capability),
		attribute.Int("agentreach.attempt", d.Attempt))
	return ctx, span
}

// MarkReply sets the error status of the handler span in ctx from its
// reply m.
func MarkReply(ctx context.Context, m *nats.Msg) {
	span := trace.SpanFromContext(ctx)
	if code := m.Header.Get(streams.HeaderError); code != "" && span.IsRecording() {
		span.SetStatus(codes.Error, code)
		span.SetAttributes(attribute.String("agentreach.error.code", code))
	}
}

// StartSend starts the span of a request m (a call, broadcast or fan-out)
// made with ctx — inside a handler, its span's child; else the child of a
// traceparent the caller set on m — and writes its context into m as
// traceparent (a dropped one too: the next hops drop theirs); it returns
// nil when the span does not record.
func StartSend(ctx context.Context, m *nats.Msg) trace.Span {
	if !Enabled() {
		return nil
	}
	if !trace.SpanContextFromContext(ctx).IsValid() && m.Header.Get(streams.HeaderTraceParent) != "" {
		ctx = traceContext.Extract(ctx, streams.HeaderCarrier(m.Header)) // the caller's own (WithHeader)
	}
	_, span := tracer.Start(ctx, "send", trace.WithSpanKind(trace.SpanKindProducer))
	if !span.IsRecording() {
		if span.SpanContext().IsValid() {
			traceContext.Inject(trace.ContextWithSpan(context.Background(), span), streams.HeaderCarrier(m.Header))
		}
		return nil
	}
	span.SetName("send " + m.Subject)
	span.SetAttributes(
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.destination.name", m.Subject),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.message.id", m.Header.Get(streams.HeaderRequestID)),
		attribute.String("gen_ai.operation.name", "invoke_agent"))
	traceContext.Inject(trace.ContextWithSpan(context.Background(), span), streams.HeaderCarrier(m.Header))
	return span
}

// EndSend ends a request's span (nil: none) with its outcome: the error
// of the request, else of its reply.
func EndSend(span trace.Span, reply *nats.Msg, err error) {
	if span == nil {
		return
	}
	if err == nil && reply != nil {
		if e := streams.ErrorFromMessage(reply); e != nil {
			err = e
		}
	}
	if err != nil {
		e := streams.AsError(err)
		span.SetStatus(codes.Error, string(e.Code)+": "+e.Message)
		span.SetAttributes(attribute.String("agentreach.error.code", string(e.Code)))
	}
	span.End()
}
