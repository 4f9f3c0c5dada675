package dispatcher

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
// installs a tracer provider no span is started, which costs a task 8 ns
// and no allocation, BenchmarkTracingOff). A task gets
// a span from its start to its outcome, "process reach.task.<capability>",
// the child of the caller's traceparent when the task has one; each
// delivery, hedges included, a child span "send reach.agent.{instance}"
// whose context travels to the agent as the delivery's traceparent: the
// same trace id, a new span id per hop (docs/operations.md, Traces). Without a recording
// span (no SDK, or not sampled) the caller's traceparent travels
// unchanged.

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

// Tracing reports whether the process has installed a tracer provider
// (otel.SetTracerProvider). Until it has, no span is started at all: a
// task then costs tracing one atomic load, and the caller's traceparent
// travels unchanged.
func Tracing() bool { return otel.GetTracerProvider() != unset }

// traceContext reads and writes W3C traceparent and tracestate, the
// contract's header whatever propagator the process installed globally.
var traceContext propagation.TraceContext

// TraceContext returns ctx with the remote span context of h's traceparent,
// when it has a valid one.
func TraceContext(ctx context.Context, h nats.Header) context.Context {
	if h.Get(streams.HeaderTraceParent) == "" {
		return ctx
	}
	return traceContext.Extract(ctx, streams.HeaderCarrier(h))
}

// InjectTrace writes span's context into h as traceparent (and
// tracestate) when it has a valid one — one the sampler dropped too, so
// that the next hops drop theirs (a parent-based sampler); h is left as it
// is otherwise.
func InjectTrace(span trace.Span, h nats.Header) {
	if !span.SpanContext().IsValid() {
		return
	}
	traceContext.Inject(trace.ContextWithSpan(context.Background(), span), streams.HeaderCarrier(h))
}

// EndSpan ends span with e's code as its error status (nil: success).
func EndSpan(span trace.Span, e *streams.Error) {
	if span == nil {
		return
	}
	if e != nil && span.IsRecording() {
		span.SetStatus(codes.Error, string(e.Code)+": "+e.Message)
		span.SetAttributes(attribute.String(AttrErrorCode, string(e.Code)))
	}
	span.End()
}

// traceTask starts t's span, the child of its caller's traceparent. Its
// name and attributes are only built when it records.
func (d *Dispatcher) traceTask(t *task) {
	if !Tracing() {
		return
	}
	_, t.span = tracer.Start(TraceContext(context.Background(), t.req.Header), "process", trace.WithSpanKind(trace.SpanKindConsumer))
	if !t.span.IsRecording() {
		return
	}
	subject := d.cfg.Subjects.Task(t.capability)
	t.span.SetName("process " + subject)
	t.span.SetAttributes(
		attribute.String(AttrMessagingSystem, "nats"),
		attribute.String(AttrMessagingDestination, subject),
		attribute.String(AttrMessagingOperation, "process"),
		attribute.String(AttrMessagingMessageID, t.requestID),
		attribute.String(AttrGenAIOperation, "invoke_agent"),
		attribute.String(AttrCapability, t.capability))
	if t.seq > 0 {
		t.span.SetAttributes(attribute.String(AttrTier, "durable"))
	}
}

// traceDelivery starts dl's span, the child of its task's, and writes its
// context into the delivery's headers h; for a task the sampler dropped it
// writes the task's, so that the agent drops its span too.
func (d *Dispatcher) traceDelivery(dl *delivery, h nats.Header) {
	if dl.t.span == nil {
		return
	}
	if !dl.t.span.IsRecording() { // not sampled: the agent learns so, and records nothing either
		InjectTrace(dl.t.span, h)
		return
	}
	destination := d.cfg.Subjects.Agent("{instance}")
	_, dl.span = tracer.Start(trace.ContextWithSpan(context.Background(), dl.t.span), "send "+destination,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String(AttrMessagingSystem, "nats"),
			attribute.String(AttrMessagingDestination, destination),
			attribute.String(AttrMessagingOperation, "send"),
			attribute.String(AttrGenAIAgentID, dl.inst.ID),
			attribute.String(AttrGenAIAgentName, dl.inst.Entry().Type),
			attribute.Int(AttrAttempt, dl.attempt),
			attribute.Bool(AttrHedge, dl.hedge)))
	InjectTrace(dl.span, h)
}

// AttrBranch is the attribute naming a broadcast's or fan-out's branch.
const AttrBranch = "agentreach.branch"

// TraceBranch starts the span of one branch of a broadcast or fan-out,
// "branch <capability>", the child of the traceparent in h (the branch
// task's headers), and writes its own context there so that the branch's
// task is its child. It returns nil when the span does not record (h then
// carries the dropped context, or is left as it is); end it with EndSpan.
func TraceBranch(h nats.Header, name, capability string) trace.Span {
	if !Tracing() {
		return nil
	}
	_, span := tracer.Start(TraceContext(context.Background(), h), "branch", trace.WithSpanKind(trace.SpanKindInternal))
	if !span.IsRecording() {
		InjectTrace(span, h)
		return nil
	}
	span.SetName("branch " + capability)
	span.SetAttributes(attribute.String(AttrBranch, name), attribute.String(AttrCapability, capability),
		attribute.String(AttrGenAIOperation, "invoke_agent"))
	InjectTrace(span, h)
	return span
}
