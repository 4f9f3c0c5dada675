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
//   - match: 10,000 simulated agents of 100 declared types; routed
//     throughput with a Reach-Require that leaves 10% of them against a
//     capability without declarations, and how soon a policy change routes.
//   - hedge: eight agents whose tasks stall 100× longer 2% of the time;
//     latency with hedged requests against without, and the hedges sent.
//   - fanout: a fan-out of ten branches against one routed call.
//   - broadcast: a broadcast to 1,000 instances against a raw NATS
//     scatter-gather to the same subscribers.
//
// The CLI runs them as `agentreach bench <scenario> [--json-file FILE] [--quick]`.
//
// Layout: this package is the registry (Run, Scenarios, the table in
// bench.go); harness is the shared machinery (the reporter, the load
// generator, the stack builder, CPU accounting); the scenarios live in
// routing (overhead, skew, hedge, fanout, security), scale (registry,
// match, broadcast) and tiers (durable, workflow, http). A new scenario is
// a func(*harness.Run) error in the package of its kind, a Scenario…
// constant and one entry in the scenarios table.
package bench
