package scale

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

const (
	broadcastCapability = "bc.echo"
	broadcastScatter    = "bench.scatter"
	broadcastTimeout    = 10 * time.Second
	broadcastConns      = 4
)

// runBroadcast measures a broadcast to a thousand instances of one
// capability against a raw NATS scatter-gather to the same thousand
// subscribers (issue 17), the two taking turns.
func Broadcast(r *harness.Run) error {
	n := harness.Pick(r, 1000, 250)
	e, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.Close()
	hb := e.Topo.HeartbeatInterval()
	ids := make([]string, n)
	recs := make([]simAgent, n)
	for k := range ids {
		ids[k] = fmt.Sprintf("bc-%04d", k)
		recs[k], err = simRecordOf(registry.Record{ID: ids[k], Type: "bcast", Capabilities: []string{broadcastCapability},
			MaxConcurrent: 4, HeartbeatMS: hb.Milliseconds()})
		if err != nil {
			return err
		}
	}
	r.Prog.Begin(fmt.Sprintf("broadcast: %d instances joining", n), nil)
	fl, err := r.StartFleet(e, "bc-fleet", ids, broadcastConns, 2, broadcastScatter)
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
	svc, err := r.StartFanOut(ds)
	if err != nil {
		return err
	}
	defer harness.StopFanOut(svc)
	if err := r.WaitRoutable(ds, broadcastCapability, n); err != nil {
		return err
	}
	caller, err := e.Connect("bc-caller")
	if err != nil {
		return err
	}
	payload := []byte(`{"ping":1}`)
	hdr := nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}}

	// broadcast gathers every instance's reply through the dispatcher.
	broadcast := func() (time.Duration, error) {
		t0 := time.Now()
		m, err := caller.RequestMsg(&nats.Msg{Subject: streams.Subjects{}.Broadcast(broadcastCapability), Data: payload, Header: hdr},
			broadcastTimeout)
		took := time.Since(t0)
		if err != nil {
			return 0, fmt.Errorf("broadcast: %w", err)
		}
		if harness.IsFailure(m) || streams.IntHeader(m.Header, streams.HeaderAnswered) != int64(n) {
			return 0, fmt.Errorf("broadcast: %s, %s of %d answered: %.300s", harness.ErrorCode(m), m.Header.Get(streams.HeaderAnswered), n, m.Data)
		}
		return took, nil
	}
	// scatter publishes once to the subject all n subscribe to and counts
	// their replies on one inbox.
	scatter := func() (time.Duration, error) {
		var got atomic.Int64
		done := make(chan struct{})
		inbox := caller.NewRespInbox()
		sub, err := caller.Subscribe(inbox, func(*nats.Msg) {
			if got.Add(1) == int64(n) {
				close(done)
			}
		})
		if err != nil {
			return 0, err
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			return 0, err
		}
		if err := caller.Flush(); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := caller.PublishMsg(&nats.Msg{Subject: broadcastScatter, Reply: inbox, Data: payload, Header: hdr}); err != nil {
			return 0, err
		}
		select {
		case <-done:
			return time.Since(t0), nil
		case <-time.After(broadcastTimeout):
			return 0, fmt.Errorf("scatter-gather: %d of %d replies after %v", got.Load(), n, broadcastTimeout)
		case <-r.Ctx.Done():
			return 0, r.Ctx.Err()
		}
	}
	type method struct {
		name string
		once func() (time.Duration, error)
	}
	methods := []method{{"broadcast", broadcast}, {"scatter", scatter}}
	// attempt runs m once; a gather that fails (not every reply in time) is
	// counted, not fatal: ok is false and err only the run's own end.
	failures := map[string]int{}
	attempt := func(m method) (d time.Duration, ok bool, err error) {
		d, err = m.once()
		if err == nil {
			return d, true, nil
		}
		if cerr := r.Ctx.Err(); cerr != nil {
			return 0, false, cerr
		}
		failures[m.name]++
		r.Logf("broadcast: %s failed: %v", m.name, err)
		return 0, false, nil
	}
	for _, m := range methods {
		r.Prog.Begin("broadcast: warm-up "+m.name, nil)
		for range 3 {
			if _, _, err := attempt(m); err != nil {
				return err
			}
		}
	}
	reps := harness.Pick(r, 30, 6)
	hists := map[string][]time.Duration{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for rep := range reps {
		r.Prog.Begin(fmt.Sprintf("broadcast: repetition %d of %d", rep+1, reps), nil)
		got := map[string]time.Duration{}
		for k := range methods {
			m := methods[(k+rep)%len(methods)]
			d, ok, err := attempt(m)
			if err != nil {
				return err
			}
			if ok {
				got[m.name] = d
				hists[m.name] = append(hists[m.name], d)
			}
		}
		if len(got) == len(methods) {
			v := harness.Ratio(float64(got["broadcast"]), float64(got["scatter"]))
			lo, hi = min(lo, v), max(hi, v)
		}
		r.Logf("broadcast rep %d: broadcast %v, scatter-gather %v", rep+1, got["broadcast"], got["scatter"])
	}
	// Where the CPU goes: each method again, back to back for a while,
	// under a CPU profile, per gather and by component.
	profileFor := harness.Pick(r, 2*time.Second, 300*time.Millisecond)
	type cpuOf struct {
		byComp map[string]time.Duration
		count  int
	}
	cpu := map[string]cpuOf{}
	for _, m := range methods {
		r.Prog.Begin(fmt.Sprintf("broadcast: %s back to back for %v under a CPU profile", m.name, profileFor), nil)
		count := 0
		byComp, err := harness.CPUByComponent(func() error {
			for end := time.Now().Add(profileFor); time.Now().Before(end); {
				_, ok, err := attempt(m)
				if err != nil {
					return err
				}
				if ok {
					count++
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		cpu[m.name] = cpuOf{byComp, count}
	}
	bc, sc := hists["broadcast"], hists["scatter"]
	if math.IsInf(lo, 1) {
		lo, hi = 0, 0 // no repetition had both
	}
	r.Set("broadcast_instances", float64(n))
	r.Set("broadcast_repetitions", float64(reps))
	r.Set("broadcast_gather_p50_ms", harness.Millis(median(bc)))
	r.Set("broadcast_gather_max_ms", harness.Millis(maxOf(bc)))
	r.Set("broadcast_scatter_p50_ms", harness.Millis(median(sc)))
	r.Set("broadcast_scatter_max_ms", harness.Millis(maxOf(sc)))
	r.Set("broadcast_gather_ratio", harness.Ratio(float64(median(bc)), float64(median(sc))))
	r.Set("broadcast_gather_ratio_rep_min", lo)
	r.Set("broadcast_gather_ratio_rep_max", hi)
	r.Set("broadcast_dropped", float64(fl.Dropped.Load()))
	r.Set("broadcast_failed", float64(failures["broadcast"]))
	r.Set("broadcast_scatter_failed", float64(failures["scatter"]))
	var cpuRows [][]string
	for _, m := range methods {
		byComp, count := cpu[m.name].byComp, cpu[m.name].count
		if byComp == nil || count == 0 {
			continue
		}
		row := []string{m.name}
		var total time.Duration
		for _, c := range []struct{ key, comp string }{{"server", harness.CompServer}, {"dispatcher", harness.CompDispatch},
			{"agents", harness.CompAgents}, {"caller", harness.CompUnlabeled}} {
			per := harness.OwnCPU(byComp, c.comp) / time.Duration(count)
			total += per
			r.Set(fmt.Sprintf("broadcast_%s_%s_cpu_ms", m.name, c.key), harness.Millis(per))
			row = append(row, harness.Cell(harness.Millis(per)))
		}
		r.Set(fmt.Sprintf("broadcast_%s_cpu_ms", m.name), harness.Millis(total))
		cpuRows = append(cpuRows, append(row, harness.Cell(harness.Millis(total)), harness.Cell(harness.Micros(total)/float64(n))))
	}
	fig := func(k string) float64 { return r.Rep.Figures[k] }
	r.AddTable(fmt.Sprintf("broadcast: %d instances, %d repetitions per method (ms until every reply is gathered)", n, reps),
		[]string{"method", "p50", "max"},
		[][]string{
			{"broadcast (reach.broadcast, through the dispatcher)", harness.Cell(fig("broadcast_gather_p50_ms")), harness.Cell(fig("broadcast_gather_max_ms"))},
			{"raw NATS scatter-gather (one publish, replies on one inbox)", harness.Cell(fig("broadcast_scatter_p50_ms")), harness.Cell(fig("broadcast_scatter_max_ms"))},
		})
	if len(cpuRows) > 0 {
		r.AddTable(fmt.Sprintf("broadcast: CPU per gather, ms (a CPU profile of each, back to back for %v, by component)", profileFor),
			[]string{"method", "nats-server", "dispatcher", "responders", "caller and runtime", "total", "µs per instance"}, cpuRows)
	}
	r.AddTable("broadcast: summary", []string{"figure", "value"}, [][]string{
		{"broadcast_gather_ratio (median broadcast / median scatter-gather)", harness.Cell(fig("broadcast_gather_ratio"))},
		{fmt.Sprintf("… repetition by repetition, lowest–highest of %d", reps), harness.Cell(lo) + "–" + harness.Cell(hi)},
	})
	r.Note("%d instances of %s, each a simulated record heartbeating in REACH_AGENTS and a real responder: its own "+
		"subscription to reach.agent.<id>, answering at once in the protocol (the FINISHED result with Reach-Node to the "+
		"delivery's reply subject), the %d subscriptions spread over %d connections, each connection's deliveries "+
		"answered by 2 goroutines. Each instance also subscribes once to %s on the same connection and echoes "+
		"what comes there to its reply subject: the baseline is one publish there and %d replies counted on one "+
		"inbox. A broadcast is one request to reach.broadcast.%s, which the dispatcher/fanout service beside the "+
		"dispatcher answers once all %d branches (one delivery per instance, no retry) have come back; it counts only "+
		"when Reach-Answered is %d (broadcast_failed and broadcast_scatter_failed count the gathers that fell short, "+
		"each timed out at 10 s or answered short; they are left out of the times). The two take turns, %d repetitions "+
		"each, who goes first alternating.",
		n, broadcastCapability, n, broadcastConns, broadcastScatter, n, broadcastCapability, n, n, reps)
	r.Goal("broadcast_gather_ratio", fmt.Sprintf("a broadcast to %d instances gathers every reply within 3 × a raw scatter-gather's time: "+
		"%.2f (median %.1f vs %.1f ms)", n, fig("broadcast_gather_ratio"), fig("broadcast_gather_p50_ms"), fig("broadcast_scatter_p50_ms")),
		fig("broadcast_gather_ratio") <= 3)
	return nil
}

// median returns the middle of ds (the upper one of an even count).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	slices.Sort(s)
	return s[len(s)/2]
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
