// Package agentkit is the Go SDK of Agent-Reach.
//
// An Agent serves capabilities: it registers itself in REACH_AGENTS,
// heartbeats from its own goroutine and connection, acknowledges every
// delivery (a task answered within AckDelay needs no separate ACKED), runs
// the handler within max_concurrent slots, and replies FINISHED or FAILED
// with an error code. It drains gracefully on context cancel or SIGTERM.
//
// Handlers run on reused worker goroutines, as many at once as tasks are
// running. A burst of short tasks runs back to back on one worker, so their
// replies leave the connection in one write; a handler that blocks never
// holds up the tasks behind it, which another worker takes.
//
// A Client calls capabilities through the dispatchers and returns the result
// with its Reach-* metadata. Inside a handler, pass the handler's context to
// Client.Call so the orchestration id, hop count and remaining deadline travel
// on to the next hop.
package agentkit
