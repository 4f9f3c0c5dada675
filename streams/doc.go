// Package streams owns the NATS side of Agent-Reach: subject builders, header
// names, wire error codes, the envelope codec (msgpack or JSON) and the
// definitions of every bucket and stream, with idempotent provisioning.
//
// Everything here is part of the wire contract in docs/protocol.md: agents
// written in other languages and the nats CLI depend on these names, so they
// change only together with the documentation.
package streams
