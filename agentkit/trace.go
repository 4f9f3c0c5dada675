package agentkit

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/agent-reach/agentreach/agentkit/internal/tracing"
)

// Tracing (OpenTelemetry, through the global API: until the process
// installs a tracer provider no span is started and the deliveries'
// traceparent passes on unchanged). A handler runs in a span
// "process reach.agent.{instance}", the child of the delivery's
// traceparent, and its ctx carries it: a Client.Call with that ctx runs in
// a child span "send reach.task.<capability>" whose context is the next
// hop's traceparent (agentkit/internal/tracing).

// TracerName is the instrumentation scope of agentkit's spans.
const TracerName = tracing.Name

// traceHandler returns the context a handler of req runs in: the agent's,
// with the handler's span, and that span when it records (nil when not).
func (a *Agent) traceHandler(req *Request) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return a.ctx, nil
	}
	return tracing.StartProcess(a.ctx, req.Header, tracing.Delivery{Destination: a.cfg.Subjects.Agent("{instance}"),
		AgentType: a.cfg.Type, AgentID: a.id, Capability: req.Capability, Attempt: req.Attempt})
}
