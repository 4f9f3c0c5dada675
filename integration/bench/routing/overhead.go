package routing

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

const (
	directSubject         = "bench.direct"
	relaySubject          = "bench.relay"
	relayAgentsSubj       = "bench.relay.agents"
	relayAgentsDirectSubj = "bench.relay.agents.direct"
	relayDirectSubj       = "bench.relay.direct"
	relayProtoDirectSubj  = "bench.relay.proto.direct"
	relayContractSubj     = "bench.relay.contract.direct"
)

// runOverhead measures what the dispatcher's hop costs: echo work through
// a plain NATS queue group versus the same work through the dispatcher to
// agentkit agents, with the same callers sending the same JSON requests.
func Overhead(r *harness.Run) error {
	e, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.Close()

	jsonHdr := nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}}
	payload := []byte(`{"text":"hello, agent"}`)

	// The baseline: echo responders in one queue group, each on its own
	// connection, answering from the subscription's goroutine. They carry
	// the agents label, as the echo agents do.
	harness.Labelled(r.Ctx, harness.CompAgents, func(context.Context) { err = startResponders(e, jsonHdr) })
	if err != nil {
		return err
	}

	// The floors of any design with a hop: a bare relay in front of the
	// same responders, with the answers coming back through it (four
	// message hops, as the dispatcher's relayed results) or going to the
	// caller directly (three, as the agents' direct results).
	harness.Labelled(r.Ctx, harness.CompDispatch, func(context.Context) {
		err = startRelay(e, relay{listen: relaySubject, to: func() string { return directSubject }})
		if err == nil {
			err = startRelay(e, relay{listen: relayDirectSubj, to: func() string { return directSubject }, direct: true})
		}
	})
	if err != nil {
		return err
	}

	// The same work routed: echo agents behind one dispatcher.
	echo, err := r.StartEcho(e, config.Config{}, false)
	if err != nil {
		return err
	}
	defer echo.Stop()

	// The same stack again on a second embedded server, its dispatcher on
	// an in-process pipe to that server rather than loopback TCP, as
	// `agentreach up` runs it: what the dispatcher's socket I/O costs. (On
	// the first server a second dispatcher would join the first one's queue
	// group and take half its tasks.)
	e2, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e2.Close()
	inproc, err := r.StartEcho(e2, config.Config{}, true)
	if err != nil {
		return err
	}
	defer inproc.Stop()

	// The floors of the dispatcher itself: a bare relay in front of the same
	// agents, sending round robin with the two headers an agent needs, with
	// the results coming back through it or, offered the caller's reply
	// subject as the dispatcher offers it, sent by the agents to the caller.
	var next atomic.Int64
	toAgent := func() string {
		return streams.Subjects{}.Agent(fmt.Sprintf("echo-%d", next.Add(1)%harness.OverheadAgents))
	}
	setAgent := func(h nats.Header, token string) {
		h.Set(streams.HeaderCapability, harness.EchoCapability)
		h.Set(streams.HeaderRequestID, token)
	}
	// The floor of the wire contract (docs/protocol.md): that second relay, also setting
	// every header the contract has a dispatcher put on each delivery
	// (a UUID request id, the orchestration id, hops and attempt), and
	// nothing else.
	setContract := func(h nats.Header, _ string) {
		id := streams.NewRequestID()
		h.Set(streams.HeaderCapability, harness.EchoCapability)
		h.Set(streams.HeaderRequestID, id)
		h.Set(streams.HeaderOrchestrationID, id)
		h.Set(streams.HeaderHops, "1")
		h.Set(streams.HeaderAttempt, "1")
	}
	harness.Labelled(r.Ctx, harness.CompDispatch, func(context.Context) {
		err = startRelay(e, relay{listen: relayAgentsSubj, to: toAgent, set: setAgent})
		if err == nil {
			err = startRelay(e, relay{listen: relayAgentsDirectSubj, to: toAgent, set: setAgent, offer: true})
		}
		if err == nil {
			err = startRelay(e, relay{listen: relayContractSubj, to: toAgent, set: setContract, offer: true})
		}
	})
	if err != nil {
		return err
	}

	// The floor of the protocol itself: the same relay, offering the
	// caller's reply subject, in front of minimal agents that answer as
	// agentkit does (the result with its headers to the caller, the notice
	// to the relay) and do nothing else. Against relay_agents_direct it
	// shows what agentkit's own work costs.
	harness.Labelled(r.Ctx, harness.CompAgents, func(context.Context) { err = startProtoAgents(e) })
	if err == nil {
		harness.Labelled(r.Ctx, harness.CompDispatch, func(context.Context) {
			err = startRelay(e, relay{listen: relayProtoDirectSubj, to: func() string {
				return streams.Subjects{}.Agent(fmt.Sprintf("proto-%d", next.Add(1)%harness.OverheadAgents))
			}, set: setAgent, offer: true})
		})
	}
	if err != nil {
		return err
	}

	callers, err := e.ConnectN("caller", 4)
	if err != nil {
		return err
	}
	inprocCallers, err := e2.ConnectN("caller", 4)
	if err != nil {
		return err
	}
	routedSubject := streams.Subjects{}.Task(harness.EchoCapability)
	closedMsg := func(subject string) func() *nats.Msg {
		return func() *nats.Msg { return &nats.Msg{Subject: subject, Data: payload, Header: jsonHdr} }
	}
	openMsg := func(subject string) harness.Request {
		return func(reply string, _ time.Time) *nats.Msg {
			return &nats.Msg{Subject: subject, Reply: reply, Data: payload, Header: jsonHdr}
		}
	}
	type method struct {
		name, subject string
		callers       []*nats.Conn // nil: callers, on the first server
	}
	methods := []method{{name: "direct", subject: directSubject}, {name: "routed", subject: routedSubject}}
	closedMethods := append(methods, method{name: "relay", subject: relaySubject}, method{name: "relay_direct", subject: relayDirectSubj},
		method{name: "relay_agents", subject: relayAgentsSubj}, method{name: "relay_agents_direct", subject: relayAgentsDirectSubj},
		method{name: "relay_contract_direct", subject: relayContractSubj},
		method{name: "relay_proto_direct", subject: relayProtoDirectSubj},
		method{name: "routed_inproc", subject: routedSubject, callers: inprocCallers})
	callersOf := func(m method) []*nats.Conn {
		if m.callers != nil {
			return m.callers
		}
		return callers
	}
	pointDur := harness.Pick(r, 5*time.Second, 500*time.Millisecond)
	const timeout = 2 * time.Second

	var rows [][]string
	row := func(method, load string, l *harness.Latency) {
		rows = append(rows, []string{method, load, harness.Cell(l.RPS()), harness.MicrosCell(l.P(50)), harness.MicrosCell(l.P(99)), harness.MicrosCell(l.P(99.9)),
			fmt.Sprint(l.Failed()), harness.Cell(l.Cores())})
		r.Logf("overhead %s %s: %v", method, load, l)
	}

	// Warm up every path (connections, buffers, the dispatcher's caches).
	for _, m := range closedMethods {
		if _, err := r.ClosedLoop(callersOf(m), harness.ClosedSpec{Step: "warm-up " + m.name, Callers: 16,
			Dur: harness.Pick(r, time.Second, 200*time.Millisecond), Timeout: timeout, Build: closedMsg(m.subject)}); err != nil {
			return err
		}
	}

	// Closed loop: 1 caller (latency of one call), 64 callers (maximum
	// throughput). Each point is measured in rounds, the methods taking
	// turns within a round, so that a stretch of minutes in which this
	// machine runs slower falls on every method alike rather than on
	// whichever was measured then.
	rounds := harness.Pick(r, harness.OverheadRounds, 1)
	byRound := map[string]map[int][]*harness.Latency{} // method → callers → one per round
	closed := map[string]map[int]*harness.Latency{}    // the same, its rounds merged
	// CPU by component of the 64-caller rounds, from CPU profiles, and the
	// requests those rounds answered: where each method's CPU goes.
	cpu64 := harness.TaskCPUs{}
	// point measures method m at c callers for one round; 64-caller rounds
	// run under a CPU profile.
	point := func(m method, c int, round int) (l *harness.Latency, err error) {
		loop := func() error {
			l, err = r.ClosedLoop(callersOf(m), harness.ClosedSpec{Step: fmt.Sprintf("%s, %d callers, round %d of %d", m.name, c, round+1, rounds),
				Callers: c, Dur: pointDur / time.Duration(rounds), Timeout: timeout, Build: closedMsg(m.subject)})
			return err
		}
		if c != harness.OverheadCallers {
			err = loop()
			return l, err
		}
		byComp, err := harness.CPUByComponent(loop)
		if byComp != nil {
			cpu64.Add(m.name, byComp, l.OK)
		}
		return l, err
	}
	measure := func(ms []method) error {
		loads := []int{1, harness.OverheadCallers}
		for round := range rounds {
			for _, c := range loads {
				for _, m := range ms {
					l, err := point(m, c, round)
					if err != nil {
						return err
					}
					if byRound[m.name] == nil {
						byRound[m.name] = map[int][]*harness.Latency{}
					}
					byRound[m.name][c] = append(byRound[m.name][c], l)
				}
			}
		}
		for _, c := range loads {
			for _, m := range ms {
				merged := harness.NewLatency()
				for _, l := range byRound[m.name][c] {
					merged.Add(l)
				}
				if closed[m.name] == nil {
					closed[m.name] = map[int]*harness.Latency{}
				}
				closed[m.name][c] = merged
				row(m.name, fmt.Sprintf("closed, %d callers", c), merged)
			}
		}
		return nil
	}
	if err := measure(closedMethods); err != nil {
		return err
	}
	// The dispatcher again, with every result relayed through it
	// (--relay-results): what the agents' direct answers buy.
	if err := echo.Restart(config.Config{RelayResults: true}, false); err != nil {
		return err
	}
	if err := measure([]method{{name: "routed_relayed", subject: routedSubject}}); err != nil {
		return err
	}
	if err := echo.Restart(config.Config{}, false); err != nil {
		return err
	}
	d1, r1 := closed["direct"][1], closed["routed"][1]
	d64, r64 := closed["direct"][harness.OverheadCallers], closed["routed"][harness.OverheadCallers]
	r.Set("direct_rps", d64.RPS())
	r.Set("routed_rps", r64.RPS())
	r.Set("throughput_ratio", harness.Ratio(r64.RPS(), d64.RPS()))
	r.Set("direct_rps_c1", d1.RPS())
	r.Set("routed_rps_c1", r1.RPS())
	r.Set("direct_p50_us_c1", harness.Micros(d1.P(50)))
	r.Set("routed_p50_us_c1", harness.Micros(r1.P(50)))
	r.Set("p50_ratio_c1", harness.Ratio(harness.Micros(r1.P(50)), harness.Micros(d1.P(50))))
	// The headline ratios round by round: how far they move within this
	// run is its own noise.
	spread := func(key string, of func(routed, direct *harness.Latency) float64, c int) {
		lo, hi := math.Inf(1), math.Inf(-1)
		for i, rl := range byRound["routed"][c] {
			v := of(rl, byRound["direct"][c][i])
			lo, hi = min(lo, v), max(hi, v)
		}
		r.Set(key+"_round_min", lo)
		r.Set(key+"_round_max", hi)
	}
	spread("throughput_ratio", func(rt, d *harness.Latency) float64 { return harness.Ratio(rt.RPS(), d.RPS()) }, harness.OverheadCallers)
	spread("p50_ratio_c1", func(rt, d *harness.Latency) float64 {
		return harness.Ratio(harness.Micros(rt.P(50)), harness.Micros(d.P(50)))
	}, 1)
	r.Set("direct_p99_us_c1", harness.Micros(d1.P(99)))
	r.Set("routed_p99_us_c1", harness.Micros(r1.P(99)))
	r.Set("direct_p50_us_c64", harness.Micros(d64.P(50)))
	r.Set("routed_p50_us_c64", harness.Micros(r64.P(50)))
	r.Set("direct_p99_us_c64", harness.Micros(d64.P(99)))
	r.Set("routed_p99_us_c64", harness.Micros(r64.P(99)))
	// The floors and the relayed variant, each against direct, in the
	// figures and in the summary table.
	floors := []struct{ name, about string }{
		{"relay", "bare relay"},
		{"relay_direct", "bare relay, answers direct"},
		{"routed_relayed", "routed, --relay-results"},
		{"routed_inproc", "routed, dispatcher on an in-process connection"},
		{"relay_agents", "bare relay to the agents"},
		{"relay_agents_direct", "bare relay to the agents, answers direct"},
		{"relay_contract_direct", "bare relay to the agents with the contract's delivery headers, answers direct"},
		{"relay_proto_direct", "bare relay to minimal protocol agents, answers direct"},
	}
	var floorRows [][]string
	for _, fl := range floors {
		c1, c64 := closed[fl.name][1], closed[fl.name][harness.OverheadCallers]
		r.Set(fl.name+"_rps", c64.RPS())
		r.Set(fl.name+"_throughput_ratio", harness.Ratio(c64.RPS(), d64.RPS()))
		r.Set(fl.name+"_p50_us_c1", harness.Micros(c1.P(50)))
		r.Set(fl.name+"_p50_ratio_c1", harness.Ratio(harness.Micros(c1.P(50)), harness.Micros(d1.P(50))))
		floorRows = append(floorRows,
			[]string{fmt.Sprintf("%s_throughput_ratio (%s/direct, 64 callers)", fl.name, fl.about), harness.Cell(r.Rep.Figures[fl.name+"_throughput_ratio"])},
			[]string{fmt.Sprintf("%s_p50_ratio_c1 (%s/direct, 1 caller)", fl.name, fl.about), harness.Cell(r.Rep.Figures[fl.name+"_p50_ratio_c1"])})
	}
	var names []string
	for _, m := range closedMethods {
		names = append(names, m.name)
	}
	cpuRows := harness.CPUPerTask(r, append(names, "routed_relayed"), cpu64)
	r.Set("routed_vs_relay_agents", harness.Ratio(r64.RPS(), closed["relay_agents"][harness.OverheadCallers].RPS()))
	r.Set("routed_vs_relay_agents_direct", harness.Ratio(r64.RPS(), closed["relay_agents_direct"][harness.OverheadCallers].RPS()))
	r.Set("routed_vs_relay_contract_direct", harness.Ratio(r64.RPS(), closed["relay_contract_direct"][harness.OverheadCallers].RPS()))
	r.Set("direct_cpu_cores_c64", d64.Cores())
	r.Set("routed_cpu_cores_c64", r64.Cores())

	// Open loop at fractions of the direct maximum, and at half the routed
	// maximum (a load both paths carry): latency under load.
	type load struct {
		suffix, label string
		rate          float64
	}
	loads := []load{
		{"_25pct", "25% of direct max", d64.RPS() * 0.25},
		{"_50pct", "50% of direct max", d64.RPS() * 0.50},
		{"_75pct", "75% of direct max", d64.RPS() * 0.75},
		{"_half_routed_max", "50% of routed max", r64.RPS() * 0.50},
	}
	cpuPer1k, ownAt, cpuRate, cpuSuffix := 0.0, 0.0, 0.0, ""
	for _, ld := range loads {
		r.Set("offered_rps"+ld.suffix, ld.rate)
		open := map[string]*harness.Latency{}
		var ownPer1k float64
		for _, m := range methods {
			var l *harness.Latency
			byComp, err := harness.CPUByComponent(func() (err error) {
				l, err = r.OpenLoop(callers[0], harness.OpenSpec{Step: fmt.Sprintf("%s, open loop at %s", m.name, ld.label),
					Rate: ld.rate, Dur: pointDur, Timeout: timeout, Build: openMsg(m.subject), Precise: true})
				return err
			})
			if err != nil {
				return err
			}
			if byComp != nil {
				for _, c := range []struct{ key, comp string }{{"dispatcher", harness.CompDispatch}, {"server", harness.CompServer},
					{"agents", harness.CompAgents}, {"generator", harness.CompUnlabeled}} {
					r.Set(m.name+"_"+c.key+"_cores"+ld.suffix, harness.Share(byComp, c.comp, l.Elapsed))
				}
				if m.name == "routed" {
					ownPer1k = harness.Ratio(harness.Share(byComp, harness.CompDispatch, l.Elapsed), l.RPS()/1000)
					r.Set("dispatcher_own_cpu_per_1k_rps"+ld.suffix, ownPer1k)
				}
			}
			open[m.name] = l
			row(m.name, fmt.Sprintf("open, %.0f req/s (%s)", ld.rate, ld.label), l)
			r.Set(m.name+"_p50_us"+ld.suffix, harness.Micros(l.P(50)))
			r.Set(m.name+"_p99_us"+ld.suffix, harness.Micros(l.P(99)))
			r.Set(m.name+"_p999_us"+ld.suffix, harness.Micros(l.P(99.9)))
			r.Set(m.name+"_timeouts"+ld.suffix, float64(l.Timeouts))
			r.Set(m.name+"_errors"+ld.suffix, float64(l.Errors))
			r.Set(m.name+"_cpu_cores"+ld.suffix, l.Cores())
			r.Set(m.name+"_send_lag_p99_us"+ld.suffix, float64(l.Lag.ValueAtQuantile(99)))
		}
		d, rt := open["direct"], open["routed"]
		r.Set("added_p50_us"+ld.suffix, harness.Micros(rt.P(50))-harness.Micros(d.P(50)))
		r.Set("added_p99_us"+ld.suffix, harness.Micros(rt.P(99))-harness.Micros(d.P(99)))
		// CPU per 1,000 answered requests per second, routed minus direct.
		per1k := 1000 * (harness.Ratio(rt.Cores(), rt.RPS()) - harness.Ratio(d.Cores(), d.RPS()))
		r.Set("dispatcher_cpu_per_1k_rps"+ld.suffix, per1k)
		// The headline comes from the highest load the routed path kept up
		// with: a saturated run's CPU is capped by the cores, not the work.
		keptUp := rt.Failed() == 0 && rt.RPS() >= 0.95*ld.rate
		if (keptUp && ld.rate > cpuRate) || cpuSuffix == "" && ld.suffix == "_half_routed_max" {
			cpuPer1k, ownAt, cpuRate, cpuSuffix = per1k, ownPer1k, ld.rate, ld.suffix
		}
	}
	r.Set("dispatcher_cpu_per_1k_rps", cpuPer1k)
	r.Set("dispatcher_own_cpu_per_1k_rps", ownAt)
	r.Set("dispatcher_cpu_at_rps", cpuRate)
	r.Set("agents", harness.OverheadAgents)
	r.Set("callers_max", harness.OverheadCallers)
	r.Set("point_seconds", pointDur.Seconds())
	r.Set("closed_rounds", float64(rounds))

	overheadReport(r, overheadFigures{rows: rows, floorRows: floorRows, cpuRows: cpuRows, rounds: rounds,
		pointDur: pointDur, timeout: timeout, cpuRate: cpuRate, cpuPer1k: cpuPer1k, ownAt: ownAt})
	return nil
}
