package scale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

const (
	matchTypes           = 100
	matchCapability      = "match.work"
	matchPlainCapability = "match.plain"
	matchPlainType       = "match-plain"
	matchCallers         = 64
	matchSlots           = 8
	matchTimeout         = 2 * time.Second
	// matchEvery: the types i with i%matchEvery == 0 are the ones the
	// requirement leaves, 10% of them.
	matchEvery = 10
	// matchRequire leaves the types i%10 == 0: pool p0 is i%5 == 0, and of
	// those history_days 30 only i%10 == 0.
	matchRequire = `{"labels":{"pool":"p0"},"limits":{"history_days":30},"permissions":["read"]}`
	// matchSettleWait bounds the wait, before each point, for the
	// dispatcher to settle the tasks of the point before.
	matchSettleWait = 30 * time.Second
	// matchPolicyGoal is issue 16's bound on a policy change reaching
	// routing.
	matchPolicyGoal = time.Second
)

// runMatch measures requirement matching at scale (issue 16): routed
// throughput of a capability offered by thousands of simulated instances
// of 100 declared types, its calls carrying a Reach-Require that leaves
// 10% of them, against a capability without declarations or requirement
// served by as many real instances; and how long a policy change takes to
// show in routing.
func Match(r *harness.Run) error {
	agents := harness.Pick(r, 10_000, 2_000)
	perType := agents / matchTypes
	real := perType * matchTypes / matchEvery
	e, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.Close()
	hb := e.Topo.HeartbeatInterval()

	r.Prog.Begin(fmt.Sprintf("match: %d declarations, %d simulated agents", matchTypes, agents+real), nil)
	js, _, err := e.JS("match-admin")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Ctx, time.Minute)
	defer cancel()
	caps, err := js.KeyValue(ctx, streams.BucketCaps)
	if err != nil {
		return err
	}
	policyKV, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		return err
	}
	for i := range matchTypes {
		if _, err := registry.PutDeclaration(ctx, caps, matchDeclaration(i)); err != nil {
			return fmt.Errorf("declaration %s: %w", matchType(i), err)
		}
	}
	// Every instance is a simulated record heartbeating; the instances the
	// requirement leaves, and as many of an undeclared type offering the
	// plain capability, are also real responders. The other 90% have no
	// subscriber: a task routed to one would come back redirected.
	var recs []simAgent
	var realIDs, plainIDs []string
	add := func(rec registry.Record) error {
		a, err := simRecordOf(rec)
		recs = append(recs, a)
		return err
	}
	for i := range matchTypes {
		for j := range perType {
			id := matchID(i, j)
			if i%matchEvery == 0 {
				realIDs = append(realIDs, id)
			}
			if err := add(registry.Record{ID: id, Type: matchType(i), Capabilities: []string{matchCapability},
				MaxConcurrent: matchSlots, HeartbeatMS: hb.Milliseconds()}); err != nil {
				return err
			}
		}
	}
	for k := range real {
		id := fmt.Sprintf("plain-%04d", k)
		plainIDs = append(plainIDs, id)
		if err := add(registry.Record{ID: id, Type: matchPlainType, Capabilities: []string{matchPlainCapability},
			MaxConcurrent: matchSlots, HeartbeatMS: hb.Milliseconds()}); err != nil {
			return err
		}
	}
	fl, err := r.StartFleet(e, "match-fleet", append(slices.Clone(realIDs), plainIDs...), 4, 2, "")
	if err != nil {
		return err
	}
	defer fl.Stop()
	s, err := newSim(e, hb)
	if err != nil {
		return err
	}
	defer s.Stop()
	if err := s.enrollAll(r.Ctx, recs); err != nil {
		return err
	}
	ds, err := r.StartDispatcher(e, config.Config{}, false)
	if err != nil {
		return err
	}
	defer ds.Stop()
	if err := r.WaitRoutable(ds, matchCapability, agents); err != nil {
		return err
	}
	if err := r.WaitRoutable(ds, matchPlainCapability, real); err != nil {
		return err
	}
	if !r.Poll(10*time.Second, func() bool {
		_, ok := ds.D.Catalog().Lookup(matchType(matchTypes - 1))
		return ok
	}) {
		return errors.Join(r.Ctx.Err(), errors.New("match: the dispatcher's catalog lacks the declarations after 10s"))
	}

	callers, err := e.ConnectN("match-caller", 4)
	if err != nil {
		return err
	}
	payload := []byte(`{"sku":"A-7","rows":10}`)
	plainHdr := nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}}
	reqHdr := nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}, streams.HeaderRequire: []string{matchRequire}}
	type method struct {
		name, subject string
		hdr           nats.Header
	}
	methods := []method{
		{"required", streams.Subjects{}.Task(matchCapability), reqHdr},
		{"plain", streams.Subjects{}.Task(matchPlainCapability), plainHdr},
	}
	build := func(m method) func() *nats.Msg {
		return func() *nats.Msg { return &nats.Msg{Subject: m.subject, Data: payload, Header: m.hdr} }
	}
	for _, m := range methods {
		if _, err := r.ClosedLoop(callers, harness.ClosedSpec{Step: "match: warm-up " + m.name, Callers: 16,
			Dur: harness.Pick(r, time.Second, 200*time.Millisecond), Timeout: matchTimeout, Build: build(m)}); err != nil {
			return err
		}
	}

	// Closed loop at 64 callers, in rounds, the methods taking turns (the
	// first of a round alternating), each point CPU-profiled and started
	// only once the dispatcher has settled every task of the one before.
	pointDur := harness.Pick(r, 2*time.Second, 500*time.Millisecond)
	type series struct {
		merged     map[string]*harness.Latency
		cpu        harness.TaskCPUs
		lo, hi     float64 // required/plain throughput, round by round
		redirected int64
		settleMax  time.Duration // longest wait for the dispatcher to settle a point's tasks
		unsettled  int64         // tasks still in flight when that wait gave up
		rounds     int
	}
	measure := func(ds *harness.Dispatch, rounds int, about string) (*series, error) {
		sr := &series{merged: map[string]*harness.Latency{}, cpu: harness.TaskCPUs{}, lo: math.Inf(1), hi: math.Inf(-1), rounds: rounds}
		for _, m := range methods {
			merged := harness.NewLatency()
			sr.merged[m.name] = merged
		}
		redirected0 := ds.D.Stats().Redirected
		for round := range rounds {
			order := methods
			if round%2 == 1 {
				order = []method{methods[1], methods[0]}
			}
			got := map[string]*harness.Latency{}
			for _, m := range order {
				r.Prog.Begin(fmt.Sprintf("match: %s, waiting for the dispatcher to settle its tasks", about), func() string {
					return fmt.Sprintf("%d in flight", ds.D.Stats().InFlight)
				})
				t0 := time.Now()
				r.Poll(matchSettleWait, func() bool { return ds.D.Stats().InFlight == 0 })
				sr.settleMax = max(sr.settleMax, time.Since(t0))
				sr.unsettled = max(sr.unsettled, ds.D.Stats().InFlight)
				var l *harness.Latency
				byComp, err := harness.CPUByComponent(func() (err error) {
					l, err = r.ClosedLoop(callers, harness.ClosedSpec{Step: fmt.Sprintf("match: %s, %s, %d callers, round %d of %d", about, m.name,
						matchCallers, round+1, rounds), Callers: matchCallers, Dur: pointDur, Timeout: matchTimeout, Build: build(m)})
					return err
				})
				if err != nil {
					return nil, err
				}
				if byComp != nil {
					sr.cpu.Add(m.name, byComp, l.OK)
				}
				got[m.name] = l
				sr.merged[m.name].Add(l)
				r.Logf("match %s %s round %d: %v; %d tasks in flight at the dispatcher", about, m.name, round+1, l, ds.D.Stats().InFlight)
			}
			v := harness.Ratio(got["required"].RPS(), got["plain"].RPS())
			sr.lo, sr.hi = min(sr.lo, v), max(sr.hi, v)
		}
		sr.redirected = ds.D.Stats().Redirected - redirected0
		return sr, nil
	}
	withEvents, err := measure(ds, harness.Pick(r, 3, 1), "default dispatcher")
	if err != nil {
		return err
	}
	merged, cpu, lo, hi, redirected, rounds := withEvents.merged, withEvents.cpu, withEvents.lo, withEvents.hi, withEvents.redirected, withEvents.rounds
	r.Set("match_settle_max_ms", harness.Millis(withEvents.settleMax))
	r.Set("match_unsettled", float64(withEvents.unsettled))
	req, plain := merged["required"], merged["plain"]
	r.Set("match_agents", float64(agents))
	r.Set("match_types", matchTypes)
	r.Set("match_real_responders", float64(real))
	r.Set("match_required_rps", req.RPS())
	r.Set("match_plain_rps", plain.RPS())
	r.Set("match_throughput_ratio", harness.Ratio(req.RPS(), plain.RPS()))
	r.Set("match_throughput_ratio_round_min", lo)
	r.Set("match_throughput_ratio_round_max", hi)
	r.Set("match_required_p50_us", harness.Micros(req.P(50)))
	r.Set("match_plain_p50_us", harness.Micros(plain.P(50)))
	r.Set("match_required_p99_us", harness.Micros(req.P(99)))
	r.Set("match_plain_p99_us", harness.Micros(plain.P(99)))
	r.Set("match_required_failed", float64(req.Failed()))
	r.Set("match_plain_failed", float64(plain.Failed()))
	r.Set("match_redirected", float64(redirected))
	usedReal := usedOf(fl, realIDs)
	r.Set("match_required_instances_used", float64(usedReal))
	r.Set("match_plain_instances_used", float64(usedOf(fl, plainIDs)))
	var cpuRows [][]string
	for _, m := range methods {
		tc := cpu[m.name]
		if tc == nil {
			continue
		}
		r.Set("match_"+m.name+"_dispatcher_us_per_req", tc.PerTask(harness.CompDispatch))
		r.Set("match_"+m.name+"_cpu_us_per_req", tc.Total())
		cpuRows = append(cpuRows, []string{m.name, harness.Cell(tc.PerTask(harness.CompServer)), harness.Cell(tc.PerTask(harness.CompDispatch)),
			harness.Cell(tc.PerTask(harness.CompAgents)), harness.Cell(tc.PerTask(harness.CompUnlabeled)), harness.Cell(tc.Total())})
	}

	// A policy change at this scale: the capability's default requirement
	// moves between two types (shard s3 → type 30, shard s4 → type 40), and
	// one caller calls it back to back without Reach-Require until a reply
	// comes from the new type.
	pol, err := policyChanges(r, ds, policyKV, callers[0], payload, harness.Pick(r, 10, 3))
	if err != nil {
		return err
	}
	r.Set("match_policy_change_ms", pol.routedMax)
	r.Set("match_policy_change_p50_ms", pol.routedP50)
	r.Set("match_policy_seen_ms", pol.seenMax)
	r.Set("match_policy_seen_p50_ms", pol.seenP50)
	r.Set("match_policy_changes", float64(pol.reps))
	r.Set("match_policy_stale_calls", float64(pol.stale))
	r.Set("match_policy_not_followed", float64(pol.missed))
	r.Set("match_policy_failed_calls", float64(pol.failed))

	// Where the time goes: the same rounds on a dispatcher that writes no
	// feedback records (NoEvents), whose records of the required method
	// carry every instance the requirement passed over.
	ds.Stop()
	quiet, err := r.StartDispatcher(e, config.Config{NoEvents: true}, false)
	if err != nil {
		return err
	}
	defer quiet.Stop()
	if err := r.WaitRoutable(quiet, matchCapability, agents); err != nil {
		return err
	}
	noEv, err := measure(quiet, harness.Pick(r, 2, 1), "dispatcher without events")
	if err != nil {
		return err
	}
	nreq, nplain := noEv.merged["required"], noEv.merged["plain"]
	r.Set("match_no_events_required_rps", nreq.RPS())
	r.Set("match_no_events_plain_rps", nplain.RPS())
	r.Set("match_throughput_ratio_no_events", harness.Ratio(nreq.RPS(), nplain.RPS()))
	for _, m := range methods {
		if tc := noEv.cpu[m.name]; tc != nil {
			r.Set("match_no_events_"+m.name+"_dispatcher_us_per_req", tc.PerTask(harness.CompDispatch))
		}
	}

	fig := func(k string) float64 { return r.Rep.Figures[k] }
	r.AddTable(fmt.Sprintf("match: %d simulated agents of %d declared types (+%d undeclared), %d callers, closed loop (%d rounds of %v per method)",
		agents, matchTypes, real, matchCallers, rounds, pointDur),
		[]string{"method", "req/s", "p50 µs", "p99 µs", "failed", "instances used"},
		[][]string{
			{"required (Reach-Require leaves 10%)", harness.Cell(req.RPS()), harness.MicrosCell(req.P(50)), harness.MicrosCell(req.P(99)), fmt.Sprint(req.Failed()), fmt.Sprintf("%d of %d", usedReal, real)},
			{"plain (no declaration, no requirement)", harness.Cell(plain.RPS()), harness.MicrosCell(plain.P(50)), harness.MicrosCell(plain.P(99)), fmt.Sprint(plain.Failed()),
				fmt.Sprintf("%.0f of %d", fig("match_plain_instances_used"), real)},
			{fmt.Sprintf("required, dispatcher with NoEvents (%d rounds)", noEv.rounds), harness.Cell(nreq.RPS()), harness.MicrosCell(nreq.P(50)), harness.MicrosCell(nreq.P(99)),
				fmt.Sprint(nreq.Failed()), ""},
			{fmt.Sprintf("plain, dispatcher with NoEvents (%d rounds)", noEv.rounds), harness.Cell(nplain.RPS()), harness.MicrosCell(nplain.P(50)), harness.MicrosCell(nplain.P(99)),
				fmt.Sprint(nplain.Failed()), ""},
		})
	if len(cpuRows) > 0 {
		r.AddTable("match: CPU per answered request, µs (CPU profiles of the same rounds, by component)",
			[]string{"method", "nats-server", "dispatcher", "responders", "callers and runtime", "total"}, cpuRows)
	}
	r.AddTable(fmt.Sprintf("match: a default requirement changed in REACH_POLICY, %d times", pol.reps),
		[]string{"figure", "p50 ms", "max ms"},
		[][]string{
			{"the dispatcher's PolicyWatcher holds the new value (Policies().Current())", harness.Cell(pol.seenP50), harness.Cell(pol.seenMax)},
			{"a routed call comes back from the new type", harness.Cell(pol.routedP50), harness.Cell(pol.routedMax)},
		})
	r.AddTable("match: summary", []string{"figure", "value"}, [][]string{
		{"match_throughput_ratio (required/plain, 64 callers)", harness.Cell(fig("match_throughput_ratio"))},
		{fmt.Sprintf("… round by round, lowest–highest of %d", rounds), harness.Cell(lo) + "–" + harness.Cell(hi)},
		{"match_policy_change_ms (max; until routing follows)", harness.Cell(pol.routedMax)},
		{"match_throughput_ratio_no_events (the same, on a dispatcher that writes no feedback records)", harness.Cell(fig("match_throughput_ratio_no_events"))},
		{"match_settle_max_ms (longest wait, before a point, for the dispatcher to settle the tasks of the one before)", harness.Cell(fig("match_settle_max_ms"))},
		{"match_redirected (deliveries retried elsewhere: no responder, or no ACK within 3 s)", fmt.Sprint(redirected)},
	})
	r.Note("Setup: %d declarations in REACH_CAPS (labels pool, shard and region; limits history_days and max_rows; read "+
		"granted, delete refused) and %d simulated agents, %d of each type, all offering %s, as records put by %d "+
		"connections and heartbeated every %v, as the registry scenario simulates them. The calls of the required "+
		"method carry Reach-Require %s, which the types i%%10 = 0 meet: %d instances (10%%). Those %d are real "+
		"responders; so are %d more records of type %s, which has no declaration, offering %s, which the plain "+
		"method calls without a requirement. The other %d instances have no subscriber: a task routed to one would be "+
		"redirected; match_redirected counts those and the deliveries retried elsewhere after no ACK in 3 s.", matchTypes, agents, perType, matchCapability, simConns, hb, matchRequire, real, real,
		real, matchPlainType, matchPlainCapability, agents-real)
	r.Note("Both methods use the same dispatcher, the same %d real responders' worth of instances (%d slots each, "+
		"answering at once in the protocol, multiplexed as subscriptions over 4 connections), the same callers and "+
		"the same payload; the routing table holds all %d records for both. So the ratio is what the requirement "+
		"costs: parsing Reach-Require (cached per value), merging it over the policy's, and the cached view of the "+
		"instances that qualify, against the shared routes as they are. Rounds of %v, methods alternating which goes "+
		"first.", real, matchSlots, agents+real, pointDur)
	r.Note("Policy change: %s in REACH_POLICY is put with registry.PutPolicy with a default requirement leaving only "+
		"type 30 (shard s3) or only type 40 (shard s4), alternately; the clock starts just before the put. "+
		"match_policy_seen_ms is when the dispatcher's Policies().Current() reflects the put (polled every 50 µs); "+
		"match_policy_change_ms when a routed call (one caller, back to back, no Reach-Require) first comes back from "+
		"the new type — the first task routed under the new requirement, whose view of the %d instances is built then. "+
		"match_policy_stale_calls counts the calls after it (50 per change) that still came from the old type; "+
		"match_policy_not_followed the changes not followed within 5 s, match_policy_failed_calls the calls that failed during the timed changes (before the first, untimed put the capability has no requirement and a call may land on an instance without a responder).", policy.KeyCapabilityPrefix+matchCapability, agents)
	r.Note("Where the time goes: a task's record in REACH_EVENTS names at most %d of the instances its requirement "+
		"passed over (Event.Excluded) and counts all %d (Event.ExcludedTotal), so a record of the required method is "+
		"about as large as the plain method's. The callers get their answers from the agents directly, and the "+
		"dispatcher settles each task when the agent's notice comes in; every point starts only once the dispatcher has "+
		"settled the one before (match_settle_max_ms), so no method inherits another's backlog. "+
		"match_throughput_ratio_no_events is the same comparison on a dispatcher started with NoEvents, after the "+
		"policy changes (%d rounds): what the requirement costs apart from its records.",
		events.ExcludedInEvents, agents-real, noEv.rounds)
	r.Goal("match_throughput_ratio", fmt.Sprintf("routed throughput with a requirement that leaves 10%% of %d agents ≥ 0.8 × "+
		"without declarations or requirement: %.2f (%.0f vs %.0f req/s); without feedback records %.2f", agents,
		fig("match_throughput_ratio"), req.RPS(), plain.RPS(), fig("match_throughput_ratio_no_events")),
		fig("match_throughput_ratio") >= 0.8)
	r.Goal("match_policy_change", fmt.Sprintf("a policy change is followed by routing within %v at %d agents: max %.1f ms, p50 %.1f ms over %d changes",
		matchPolicyGoal, agents, pol.routedMax, pol.routedP50, pol.reps), pol.missed == 0 && pol.routedMax <= harness.Millis(matchPolicyGoal))
	return nil
}
