// Package integration holds Agent-Reach's end-to-end and fault tests, run
// against real embedded nats-servers, and the helpers (stacks, fault agents)
// they share with the benchmark suite.
package integration
