// Package chaos is the chaos suite (issue 26, DESIGN.md §6.5 and §7): a
// 3-node nats-server cluster of real child processes with the shipped
// settings (R3, sync_interval always, cluster ping_interval 1 s), two
// dispatcher processes on different nodes, agents that record every
// execution per idempotency key, a steady durable and direct load, and a
// ledger — accepted, lost, doubled, executed twice, time to converge —
// around each fault: a node bounce, a dispatcher SIGKILL and SIGSTOP,
// every agent killed together (on loopback), and, in network namespaces, a
// minority partition, the isolation of the node leading every JetStream
// group, and a flapping link. Any lost, doubled or twice-executed task, or
// convergence over 5 s after the heal, fails a scenario.
//
// `make chaos` runs all of it; `make chaos-short`, a part of `make test`,
// runs the loopback scenarios but the SIGSTOP. AGENTREACH_CHAOS_LOGS names a
// directory where every process's log is kept (one directory per test).
//
// Its tests carry the build tag chaos: plain go test skips them. Run them
// with `make chaos` or
//
//	go test -tags chaos -v -timeout 30m ./integration/chaos
//
// AGENTREACH_CHAOS_BIN names a directory holding nats-server and agentreach
// already built (make chaos builds them); without it the suite builds both
// into a temporary directory first.
package chaos
