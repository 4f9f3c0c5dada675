// Package tracing gives the dispatcher's tasks their OpenTelemetry spans
// (docs/operations.md, Traces), through the global API: until the process
// installs a tracer provider no span is started, which costs a task one
// atomic load and no allocation. A task gets a span from its start to its
// outcome, "process reach.task.<capability>", the child of the caller's
// traceparent when the task has one (Task); each delivery, hedges included,
// a child span "send reach.agent.{instance}" whose context travels to the
// agent as the delivery's traceparent (Delivery): the same trace id, a new
// span id per hop. Without a recording span (no SDK, or not sampled) the
// caller's traceparent travels unchanged.
package tracing
