package routing

import (
	"fmt"
	"time"

	"github.com/agent-reach/agentreach/integration/bench/harness"
)

// overheadFigures is what the overhead scenario's tables and notes need
// besides the figures it has set.
type overheadFigures struct {
	rows, floorRows, cpuRows [][]string
	rounds                   int
	pointDur, timeout        time.Duration
	cpuRate, cpuPer1k, ownAt float64
}

// overheadReport adds the overhead scenario's tables, notes and goals.
func overheadReport(r *harness.Run, o overheadFigures) {
	r.AddTable("overhead: echo through a plain queue group (direct) vs through the dispatcher (routed)",
		[]string{"method", "load", "answered/s", "p50 µs", "p99 µs", "p99.9 µs", "failed", "CPU cores"}, o.rows)
	fig := r.Rep.Figures
	summary := [][]string{
		{"throughput_ratio (routed/direct, 64 callers)", harness.Cell(fig["throughput_ratio"])},
		{fmt.Sprintf("… round by round, lowest–highest of %d", o.rounds), harness.Cell(fig["throughput_ratio_round_min"]) + "–" + harness.Cell(fig["throughput_ratio_round_max"])},
		{"p50_ratio_c1 (routed/direct, 1 caller)", harness.Cell(fig["p50_ratio_c1"])},
		{fmt.Sprintf("… round by round, lowest–highest of %d", o.rounds), harness.Cell(fig["p50_ratio_c1_round_min"]) + "–" + harness.Cell(fig["p50_ratio_c1_round_max"])},
	}
	summary = append(summary, o.floorRows...)
	if len(o.cpuRows) > 0 {
		r.AddTable("overhead: CPU per answered request at 64 callers, µs (CPU profiles of the same rounds, by component)",
			[]string{"method", "nats-server", "dispatcher or relay", "agents or responders", "callers and runtime", "total", "× direct"}, o.cpuRows)
	}
	r.AddTable("overhead: summary", []string{"figure", "value"}, append(summary, [][]string{
		{"routed_vs_relay_agents (routed/bare relay to the agents, 64 callers)", harness.Cell(fig["routed_vs_relay_agents"])},
		{"routed_vs_relay_agents_direct (routed/bare relay to the agents, answers direct, 64 callers)",
			harness.Cell(fig["routed_vs_relay_agents_direct"])},
		{"routed_vs_relay_contract_direct (routed/the same with the contract's delivery headers, 64 callers)",
			harness.Cell(fig["routed_vs_relay_contract_direct"])},
		{"added_p99_us_50pct", harness.Cell(fig["added_p99_us_50pct"])},
		{"added_p99_us_half_routed_max", harness.Cell(fig["added_p99_us_half_routed_max"])},
		{fmt.Sprintf("dispatcher_cpu_per_1k_rps (cores, at %.0f req/s; routed − direct)", o.cpuRate), fmt.Sprintf("%.3f", o.cpuPer1k)},
		{"dispatcher_own_cpu_per_1k_rps (cores; its own goroutines, profiled)", fmt.Sprintf("%.3f", o.ownAt)},
	}...))
	r.Note("Both methods are called the same way: raw NATS requests with Content-Type application/json, "+
		"callers on their own connections; the baseline's %d responders and the %d agents each have their own connection.",
		harness.OverheadAgents, harness.OverheadAgents)
	r.Note("Closed-loop points are measured in rounds (%d here, of %v each), the methods taking turns within each round "+
		"(routed_relayed, which needs the dispatcher restarted, in rounds of its own afterwards); a point's figures "+
		"merge its rounds. Measured one after another instead, the ratios moved with the machine's drift. "+
		"*_round_min and *_round_max give the headline ratios round by round: how far they move within one run.", o.rounds, o.pointDur/time.Duration(o.rounds))
	r.Note("relay, relay_direct and relay_agents are floors measured in the same run: a bare relay (one connection, " +
		"a map of reply subjects, nothing else) in front of the direct responders, with the answers coming back " +
		"through it (relay, four message hops) or sent by the responders to the caller (relay_direct, three hops); " +
		"and two in front of the echo agents, sending round robin with Reach-Capability and Reach-Request-Id, answers " +
		"through the relay (relay_agents) or, offered the caller's reply subject as the dispatcher offers it, sent by " +
		"the agents to the caller, the relay dropping their notices (relay_agents_direct). No design with a hop in the " +
		"data path beats relay_direct; relay_agents_direct is what the dispatcher would cost if routing, timeouts, " +
		"retries, breakers and feedback records were free. relay_proto_direct is the same relay in front of minimal " +
		"agents that speak the protocol as agentkit does — the result to the caller with Reach-Status, Reach-Request-Id, " +
		"Reach-Orchestration-Id, Reach-Attempt, Reach-Node and Content-Type, then the bodiless notice to the relay — " +
		"from their subscription's goroutine and nothing else: the floor of the protocol, so the gap to " +
		"relay_agents_direct is agentkit's own work. relay_contract_direct is relay_agents_direct also setting " +
		"every header docs/protocol.md has a dispatcher put on each delivery — Reach-Request-Id as a UUID, " +
		"Reach-Orchestration-Id, Reach-Hops, Reach-Attempt — and nothing else: no routing, timeout, retry, breaker, " +
		"load accounting or feedback record. It is the floor of any dispatcher that keeps the wire contract; " +
		"routed_vs_relay_contract_direct is what the dispatcher's own work leaves of it.")
	r.Note("Routed requests make three message hops on the caller's path (caller→dispatcher→agent, agent→caller) " +
		"against two for the direct queue group, plus the agent's bodiless notice to the dispatcher off that path " +
		"(a task slower than agentkit.AckDelay adds an ACK). routed_relayed is the same dispatcher with " +
		"--relay-results: the result goes agent→dispatcher→caller, four hops. routed_inproc is the same stack " +
		"(callers, dispatcher, agents) on a second embedded server in this process, its dispatcher on an in-process " +
		"pipe to that server instead of loopback TCP, as `agentreach up` runs it: neither it nor the server reads or " +
		"writes a socket for the dispatcher's messages; callers and agents stay on TCP.")
	r.Note("Everything shares one process and %d cores, so dispatcher_cpu_per_1k_rps is the difference in whole-process "+
		"CPU (getrusage) per 1,000 answered req/s between the routed and the direct open-loop runs at the same offered "+
		"rate: the highest of the open-loop rates that the routed path kept up with (dispatcher_cpu_at_rps). "+
		"It charges the dispatcher with everything the routed path adds: its own work, the nats-server routing two "+
		"more messages per task (the delivery and the notice), and agentkit's slot, ACK timer and worker hand-off "+
		"against a bare responder, less what "+
		"the baseline spends that the routed path does not; it is no strict bound either way.", harness.NumCPU())
	r.Note("CPU per answered request: every 64-caller round is CPU-profiled and its samples summed by the profiling "+
		"label of the goroutine they hit — the nats-server (for routed_inproc, the second server), the dispatcher or "+
		"relay, the agents or responders, and the rest: the callers, timers and the Go runtime — with the background "+
		"GC's samples shared out in proportion, then divided by the requests those rounds answered. Everything "+
		"shares %d cores and keeps them about equally busy, so throughput_ratio is close to direct's total over "+
		"routed's: 0.5 needs a routed request to cost at most twice the CPU of a direct one.", harness.NumCPU())
	r.Note("Open-loop latency is measured from each request's intended (Poisson) send time; timed-out and failed "+
		"requests count at the %v timeout. <method>_send_lag_p99_us is how late the generator itself sent: on a "+
		"saturated or shared machine it waits for a core too, and that wait is part of every latency.", o.timeout)
	r.Note("The 25/50/75%% loads are fractions of the direct maximum, as issue 3 asks; when the routed maximum is " +
		"below them the routed runs saturate (OVERLOADED at the dispatcher's in-flight limit, TARGET_BUSY, timeouts) " +
		"and added_p99 there mostly measures queueing. *_half_routed_max is a load both paths carry.")
	r.Goal("throughput_ratio", fmt.Sprintf("throughput_ratio ≥ 0.5 at 64 callers: %.2f (floors: a relay doing nothing but "+
		"set the contract's delivery headers, in front of the same agents, %.2f; in front of minimal protocol agents, %.2f)",
		fig["throughput_ratio"], fig["relay_contract_direct_throughput_ratio"], fig["relay_proto_direct_throughput_ratio"]),
		fig["throughput_ratio"] >= 0.5)
	r.Goal("p50_ratio_c1", fmt.Sprintf("p50_ratio_c1 ≤ 1.6: %.2f (floors: minimal protocol agents behind a relay doing "+
		"nothing, %.2f; a bare three-hop relay, %.2f)", fig["p50_ratio_c1"], fig["relay_proto_direct_p50_ratio_c1"],
		fig["relay_direct_p50_ratio_c1"]),
		fig["p50_ratio_c1"] <= 1.6)
	r.Note("dispatcher_own_cpu_per_1k_rps is the dispatcher's own share, from a CPU profile taken during the same run: " +
		"samples of goroutines labelled as the dispatcher's (its connection's read and flush loops, its subscription " +
		"handlers, its per-task goroutines, each with the GC assists they pay), plus their proportional part of the " +
		"background GC. It leaves out what the extra hop costs the nats-server (<method>_server_cores).")
	if o.ownAt == 0 {
		r.Note("No CPU profile could be taken (the process is already being profiled), so the dispatcher's own " +
			"CPU is unknown; the goal below is judged on the routed-minus-direct difference.")
		o.ownAt = o.cpuPer1k
	}
	r.Goal("dispatcher_cpu", fmt.Sprintf("dispatcher ≤ 0.05 cores per 1k req/s: %.3f own (profiled); the whole "+
		"routed-minus-direct difference is %.3f", o.ownAt, o.cpuPer1k), o.ownAt <= 0.05)
}
