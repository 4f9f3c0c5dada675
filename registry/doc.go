// Package registry keeps the list of live agent instances in the
// REACH_AGENTS bucket: the agent record, its validation, the heartbeat writer
// that keeps a record alive, and the routing table that watches the bucket.
//
// Liveness is decided by the NATS server alone: a record lives while its
// agent keeps putting it, and the bucket's TTL (3 × heartbeat) removes it
// otherwise. The server then writes a limit marker, which every watching
// routing table sees within milliseconds. No agent's clock is ever compared
// with another's.
package registry
