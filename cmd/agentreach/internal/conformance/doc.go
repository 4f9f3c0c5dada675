// Package conformance holds the conformance command: it checks an agent
// in any language against the wire contract (docs/conformance.md).
package conformance
