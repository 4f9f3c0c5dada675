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

// TracerName is the instrumentation scope of the dispatcher's spans.
const TracerName = "github.com/agent-reach/agentreach/dispatcher"

// Attribute keys of the spans: OpenTelemetry's messaging and GenAI
// semantic conventions, and the task's own.
const (
	AttrMessagingSystem      = "messaging.system"
	AttrMessagingDestination = "messaging.destination.name"
	AttrMessagingOperation   = "messaging.operation.type"
	AttrMessagingMessageID   = "messaging.message.id"
	AttrGenAIOperation       = "gen_ai.operation.name"
	AttrGenAIAgentName       = "gen_ai.agent.name"
	AttrGenAIAgentID         = "gen_ai.agent.id"
	AttrCapability           = "agentreach.capability"
	AttrAttempt              = "agentreach.attempt"
	AttrHedge                = "agentreach.hedge"
	AttrTier                 = "agentreach.tier"
	AttrErrorCode            = "agentreach.error.code"
)

var tracer = otel.Tracer(TracerName)

// unset is the global tracer provider before any is installed.
var unset = otel.GetTracerProvider()

// Enabled reports whether the process has installed a tracer provider
// (otel.SetTracerProvider). Until it has, no span is started at all: a
// task then costs tracing one atomic load, and the caller's traceparent
// travels unchanged.
func Enabled() bool { return otel.GetTracerProvider() != unset }

// traceContext reads and writes W3C traceparent and tracestate, the
// contract's header whatever propagator the process installed globally.
var traceContext propagation.TraceContext

// Context returns ctx with the remote span context of h's traceparent,
// when it has a valid one.
func Context(ctx context.Context, h nats.Header) context.Context {
	if h.Get(streams.HeaderTraceParent) == "" {
		return ctx
	}
	return traceContext.Extract(ctx, streams.HeaderCarrier(h))
}

// Inject writes span's context into h as traceparent (and
// tracestate) when it has a valid one — one the sampler dropped too, so
// that the next hops drop theirs (a parent-based sampler); h is left as it
// is otherwise.
func Inject(span trace.Span, h nats.Header) {
	if !span.SpanContext().IsValid() {
		return
	}
	traceContext.Inject(trace.ContextWithSpan(context.Background(), span), streams.HeaderCarrier(h))
}

// End ends span with e's code as its error status (nil: success).
func End(span trace.Span, e *streams.Error) {
	if span == nil {
		return
	}
	if e != nil && span.IsRecording() {
		span.SetStatus(codes.Error, string(e.Code)+": "+e.Message)
		span.SetAttributes(attribute.String(AttrErrorCode, string(e.Code)))
	}
	span.End()
}

// Task starts the span of a task of capability received on subject (its
// request's headers h), the child of its caller's traceparent; durable
// says it came through REACH_TASKS. Its name and attributes are only built
// when it records. It returns nil while tracing is off (Enabled); end the
// span with End.
func Task(h nats.Header, subject, requestID, capability string, durable bool) trace.Span {
	if !Enabled() {
		return nil
	}
	_, span := tracer.Start(Context(context.Background(), h), "process", trace.WithSpanKind(trace.SpanKindConsumer))
	if !span.IsRecording() {
		return span
	}
	span.SetName("process " + subject)
	span.SetAttributes(
		attribute.String(AttrMessagingSystem, "nats"),
		attribute.String(AttrMessagingDestination, subject),
		attribute.String(AttrMessagingOperation, "process"),
		attribute.String(AttrMessagingMessageID, requestID),
		attribute.String(AttrGenAIOperation, "invoke_agent"),
		attribute.String(AttrCapability, capability))
	if durable {
		span.SetAttributes(attribute.String(AttrTier, "durable"))
	}
	return span
}

// Delivery starts the span of one delivery of the task whose span is
// parent, to instance (of type agentType) on destination, and writes its
// context into the delivery's headers h. For a task the sampler dropped it
// writes the task's, so that the agent drops its span too, and returns
// nil; so it does for a nil parent (tracing off), leaving h as it is.
func Delivery(parent trace.Span, h nats.Header, destination, instance, agentType string, attempt int, hedge bool) trace.Span {
	if parent == nil {
		return nil
	}
	if !parent.IsRecording() { // not sampled: the agent learns so, and records nothing either
		Inject(parent, h)
		return nil
	}
	_, span := tracer.Start(trace.ContextWithSpan(context.Background(), parent), "send "+destination,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String(AttrMessagingSystem, "nats"),
			attribute.String(AttrMessagingDestination, destination),
			attribute.String(AttrMessagingOperation, "send"),
			attribute.String(AttrGenAIAgentID, instance),
			attribute.String(AttrGenAIAgentName, agentType),
			attribute.Int(AttrAttempt, attempt),
			attribute.Bool(AttrHedge, hedge)))
	Inject(span, h)
	return span
}

// AttrBranch is the attribute naming a broadcast's or fan-out's branch.
const AttrBranch = "agentreach.branch"

// Branch starts the span of one branch of a broadcast or fan-out,
// "branch <capability>", the child of the traceparent in h (the branch
// task's headers), and writes its own context there so that the branch's
// task is its child. It returns nil when the span does not record (h then
// carries the dropped context, or is left as it is); end it with End.
func Branch(h nats.Header, name, capability string) trace.Span {
	if !Enabled() {
		return nil
	}
	_, span := tracer.Start(Context(context.Background(), h), "branch", trace.WithSpanKind(trace.SpanKindInternal))
	if !span.IsRecording() {
		Inject(span, h)
		return nil
	}
	span.SetName("branch " + capability)
	span.SetAttributes(attribute.String(AttrBranch, name), attribute.String(AttrCapability, capability),
		attribute.String(AttrGenAIOperation, "invoke_agent"))
	Inject(span, h)
	return span
}
