// Package bench is Agent-Reach's benchmark suite: the dispatcher measured
// against what a user would otherwise pick — a plain NATS queue group and a
// JetStream pull work-queue — in one run on one machine, so that the
// comparison holds on noisy hardware.
//
// Every scenario runs in-process against a nats-server on loopback, with
// separate connections for callers, dispatcher and agents. The server is
// embedded, except in registry, which measures it: there it is this
// program started again as a server process, so every program that runs
// scenarios calls ServeChild first thing in main or TestMain.
// Latency comes from HDR histograms; load is open-loop (Poisson arrivals,
// latency measured from each request's intended send time, so a stall is
// not hidden by coordinated omission) except where maximum throughput is
// the question. A request that times out counts in the percentiles at its
// timeout and is also counted on its own. Each scenario first spins one
// thread for two seconds and reports how steadily the machine ran it
// (machine_*): on a shared or throttled virtual machine the vCPUs slow down
// for stretches of milliseconds that stall every method alike.
//
// Scenarios:
//
//   - overhead: echo agents; a direct queue group versus the dispatcher.
//   - skew: eight agents of which some are slow or stall; queue group, pull
//     work-queue and the dispatcher's strategies at the same offered loads.
//   - durable: raw JetStream async publish versus reach.submit submission.
//   - registry: thousands of simulated agents heartbeating; join-to-routable
//     time, a crashed agent's exit, memory and CPU per 1,000 agents.
//
// The CLI runs them as `agentreach bench <scenario> [--json-file FILE] [--quick]`.
package bench
