// Package agentkit is the Go SDK of Agent-Reach.
//
// An Agent serves capabilities: it registers itself in REACH_AGENTS,
// heartbeats from its own goroutine and connection, answers every delivery
// with ACKED at once, runs the handler within max_concurrent slots, and
// replies FINISHED or FAILED with an error code. It drains gracefully on
// context cancel or SIGTERM.
//
// A Client calls capabilities through the dispatchers and returns the result
// with its Reach-* metadata. Inside a handler, pass the handler's context to
// Client.Call so the orchestration id, hop count and remaining deadline travel
// on to the next hop.
package agentkit
