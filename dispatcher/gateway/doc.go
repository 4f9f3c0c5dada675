// Package gateway is the HTTP side of a dispatcher (docs/operations.md): the
// ingress API, /healthz, /metrics and the dashboard.
//
// A Gateway routes HTTP calls through its dispatcher in process
// (Dispatcher.Call: the same admission, routing, retries, events and
// stats as a task from NATS, minus one message hop), submits durable tasks
// to REACH_TASKS, reads results from REACH_RESULTS, and sends broadcasts
// and fan-outs as NATS requests to reach.broadcast.<capability> and
// reach.fanout, where the fan-out service of any replica answers them.
// At /mcp it serves the routable capabilities as MCP tools (package mcp,
// docs/mcp.md).
//
// Every error is JSON {"code", "message"} with the HTTP status of its code
// (Status); the mapping is in docs/operations.md. Request headers of the
// wire contract (Reach-Request-Id, Reach-Timeout, Reach-Require, …,
// traceparent) pass through to the task, and the reply's come back as
// response headers. Who the caller is, is the Identifier's to say: the
// gateway asks it once per request (the hook for bearer tokens).
package gateway
