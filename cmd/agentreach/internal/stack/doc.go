// Package stack holds the commands that run Agent-Reach: up (embedded
// NATS, a dispatcher, the demo agents, auth and TLS for a local stack),
// dispatcher (a replica against an existing cluster) and auth (the
// identities and certificates they use).
package stack
