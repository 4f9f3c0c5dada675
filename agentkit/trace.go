package agentkit

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

// Tracing (OpenTelemetry, through the global API: until the process
// installs a tracer provider no span is started and the deliveries'
// traceparent passes on unchanged). A
// handler runs in a span "process reach.agent.{instance}", the child of
// the delivery's traceparent, and its ctx carries it: a Client.Call with
// that ctx runs in a child span "send reach.task.<capability>" whose
// context is the next hop's traceparent.

// TracerName is the instrumentation scope of agentkit's spans.
const TracerName = "github.com/agent-reach/agentreach/agentkit"

var tracer = otel.Tracer(TracerName)

// unset is the global tracer provider before any is installed: until the
// process installs one, no span is started at all.
var unset = otel.GetTracerProvider()

func tracing() bool { return otel.GetTracerProvider() != unset }

// traceContext reads and writes W3C traceparent, the contract's header,
// whatever propagator the process installed globally.
var traceContext propagation.TraceContext

// traceHandler returns the context a handler of req runs in: the agent's,
// with the handler's span — also one the sampler dropped, so that calls
// from the handler are dropped alike — and that span when it records (nil
// when it does not).
func (a *Agent) traceHandler(req *Request) (context.Context, trace.Span) {
	if !tracing() {
		return a.ctx, nil
	}
	parent := a.ctx
	if req.Header.Get(streams.HeaderTraceParent) != "" {
		parent = traceContext.Extract(parent, streams.HeaderCarrier(req.Header))
	}
	ctx, span := tracer.Start(parent, "process", trace.WithSpanKind(trace.SpanKindConsumer))
	switch {
	case !span.SpanContext().IsValid():
		return a.ctx, nil
	case !span.IsRecording():
		return ctx, nil
	}
	destination := a.cfg.Subjects.Agent("{instance}")
	span.SetName("process " + destination)
	span.SetAttributes(
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.destination.name", destination),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", a.cfg.Type),
		attribute.String("gen_ai.agent.id", a.id),
		attribute.String("agentreach.capability", req.Capability),
		attribute.Int("agentreach.attempt", req.Attempt))
	return ctx, span
}

// markReply sets the error status of the handler span of req's reply m.
func markReply(req *Request, m *nats.Msg) {
	c := req.ctx.Load()
	if c == nil {
		return
	}
	span := trace.SpanFromContext(c.Context)
	if code := m.Header.Get(streams.HeaderError); code != "" && span.IsRecording() {
		span.SetStatus(codes.Error, code)
		span.SetAttributes(attribute.String("agentreach.error.code", code))
	}
}

// traceCall starts the span of a request m (a call, broadcast or fan-out)
// made with ctx — inside a handler, its span's child; else the child of a
// traceparent the caller set on m — and writes its
// context into m as traceparent (a dropped one too: the next hops drop
// theirs); it returns nil when the span does not record.
func traceCall(ctx context.Context, m *nats.Msg) trace.Span {
	if !tracing() {
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

// endCall ends a request's span with its outcome: the error of the
// request, else of its reply.
func endCall(span trace.Span, reply *nats.Msg, err error) {
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
