// Package harness is what every benchmark scenario shares: the reporter
// (Run: figures, tables, notes, goals, progress, and Execute, which wraps a
// scenario with the machine-steadiness check and the figures every report
// has), the load generator (OpenLoop, ClosedLoop and their Latency
// histograms), the stack builder (Env: a nats-server on loopback, embedded
// or in a process of its own, with the topology provisioned; agents,
// dispatchers, the echo stack, protocol fleets and the fan-out service
// started on it) and the CPU accounting (per process, per child process and
// per profiled component).
//
// A scenario is a func(*Run) error in a scenario package (routing, scale,
// tiers) registered by name in package bench.
package harness
