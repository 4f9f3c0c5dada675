package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/streams"
)

const (
	fanBranches = 10
	fanService  = 2 * time.Millisecond
	fanSlots    = 64
	fanTimeout  = 2 * time.Second
	// fanRate is the offered rate of each method, in requests per second:
	// a fan-out is ten tasks, so the fan-out method's agents see ten times
	// as many.
	fanRate = 50
)

// fanCapability is the capability of branch k.
func fanCapability(k int) string { return fmt.Sprintf("fan.c%d", k) }

// runFanOut measures a fan-out of ten branches over ten capabilities
// against one routed call to one of them (issue 17): open loop at a light
// load, the methods taking turns.
func runFanOut(r *run) error {
	e, err := startEnv(r.ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.close()
	ds, err := r.startDispatcher(e, dispatcher.Config{}, false)
	if err != nil {
		return err
	}
	defer ds.stop()
	svc, err := r.startFanOut(ds)
	if err != nil {
		return err
	}
	defer stopFanOut(svc)
	handler := func(int) agentkit.Handler {
		return func(ctx context.Context, req *agentkit.Request) (any, error) {
			if err := sleepCtx(ctx, fanService); err != nil {
				return nil, err
			}
			return req.Data, nil
		}
	}
	for k := range fanBranches {
		set, err := r.startAgents(e, []string{fanCapability(k)}, fmt.Sprintf("fan%d", k), 1, fanSlots, handler)
		if err != nil {
			return err
		}
		defer set.stop()
		if err := r.waitRoutable(ds, fanCapability(k), 1); err != nil {
			return err
		}
	}
	caller, err := e.connect("fan-caller")
	if err != nil {
		return err
	}
	type branch struct {
		Name       string          `json:"name"`
		Capability string          `json:"capability"`
		Payload    json.RawMessage `json:"payload"`
		TimeoutMS  int64           `json:"timeout_ms"`
	}
	var body struct {
		Branches []branch `json:"branches"`
		Mode     string   `json:"mode"`
	}
	body.Mode = string(fanout.ModeAll)
	for k := range fanBranches {
		body.Branches = append(body.Branches, branch{Name: fmt.Sprintf("b%d", k), Capability: fanCapability(k),
			Payload: skewPayload, TimeoutMS: fanTimeout.Milliseconds()})
	}
	fanBody, err := json.Marshal(body)
	if err != nil {
		return err
	}
	header := func(intended time.Time) nats.Header {
		return nats.Header{
			streams.HeaderContentType: []string{streams.ContentTypeJSON},
			streams.HeaderDeadline:    []string{strconv.FormatInt(intended.Add(fanTimeout).UnixMilli(), 10)},
		}
	}
	var next atomic.Int64
	type method struct {
		name  string
		build request
	}
	methods := []method{
		{"fanout", func(reply string, intended time.Time) *nats.Msg {
			return &nats.Msg{Subject: streams.Subjects{}.FanOut(), Reply: reply, Data: fanBody, Header: header(intended)}
		}},
		{"single", func(reply string, intended time.Time) *nats.Msg {
			k := int(next.Add(1) % fanBranches) // each capability in turn
			return &nats.Msg{Subject: streams.Subjects{}.Task(fanCapability(k)), Reply: reply, Data: skewPayload, Header: header(intended)}
		}},
	}
	for _, m := range methods {
		if _, err := r.openLoop(caller, openSpec{step: "fanout: warm-up " + m.name, rate: fanRate,
			dur: pick(r, time.Second, 300*time.Millisecond), timeout: fanTimeout, build: m.build}); err != nil {
			return err
		}
	}
	rounds := pick(r, 5, 2)
	dur := pick(r, 3*time.Second, 700*time.Millisecond)
	merged := map[string]*latency{}
	for _, m := range methods {
		merged[m.name] = newLatency()
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for round := range rounds {
		got := map[string]*latency{}
		for k := range methods {
			m := methods[(k+round)%len(methods)]
			l, err := r.openLoop(caller, openSpec{step: fmt.Sprintf("fanout: %s, %d req/s, round %d of %d", m.name, fanRate, round+1, rounds),
				rate: fanRate, dur: dur, timeout: fanTimeout, build: m.build})
			if err != nil {
				return err
			}
			got[m.name] = l
			merged[m.name].add(l)
			r.logf("fanout %s round %d: %v", m.name, round+1, l)
		}
		v := ratio(usf(got["fanout"].p(50)), usf(got["single"].p(50)))
		lo, hi = min(lo, v), max(hi, v)
	}
	fo, single := merged["fanout"], merged["single"]
	r.set("fanout_p50_ms", ms(fo.p(50)))
	r.set("fanout_p99_ms", ms(fo.p(99)))
	r.set("fanout_p999_ms", ms(fo.p(99.9)))
	r.set("fanout_single_p50_ms", ms(single.p(50)))
	r.set("fanout_single_p99_ms", ms(single.p(99)))
	r.set("fanout_single_p999_ms", ms(single.p(99.9)))
	r.set("fanout_p50_ratio", ratio(usf(fo.p(50)), usf(single.p(50))))
	r.set("fanout_p50_ratio_round_min", lo)
	r.set("fanout_p50_ratio_round_max", hi)
	r.set("fanout_p99_ratio", ratio(usf(fo.p(99)), usf(single.p(99))))
	r.set("fanout_failed", float64(fo.failed()))
	r.set("fanout_single_failed", float64(single.failed()))
	r.set("fanout_branches", fanBranches)
	r.set("fanout_offered_rps", fanRate)
	fig := func(k string) float64 { return r.rep.Figures[k] }
	r.addTable(fmt.Sprintf("fanout: %d branches over %d capabilities, agents answering in %v; open-loop Poisson at %d req/s "+
		"per method, %d rounds of %v (latencies in ms)", fanBranches, fanBranches, fanService, fanRate, rounds, dur),
		[]string{"method", "p50", "p99", "p99.9", "failed"},
		[][]string{
			{"fan-out (reach.fanout, mode all)", f(ms(fo.p(50))), f(ms(fo.p(99))), f(ms(fo.p(99.9))), fmt.Sprint(fo.failed())},
			{"one routed call (reach.task)", f(ms(single.p(50))), f(ms(single.p(99))), f(ms(single.p(99.9))), fmt.Sprint(single.failed())},
		})
	r.addTable("fanout: summary", []string{"figure", "value"}, [][]string{
		{"fanout_p50_ratio (fan-out / one call)", f(fig("fanout_p50_ratio"))},
		{fmt.Sprintf("… round by round, lowest–highest of %d", rounds), f(lo) + "–" + f(hi)},
		{"fanout_p99_ratio", f(fig("fanout_p99_ratio"))},
	})
	r.note("Ten capabilities %s…%s, each served by one agentkit agent (%d slots) whose handler sleeps %v; one dispatcher "+
		"with the dispatcher/fanout service beside it on its connection, as `agentreach up` runs them. The fan-out "+
		"method requests reach.fanout with one branch per capability (mode all, timeout_ms %d); the other calls "+
		"reach.task.<cap>, the ten capabilities in turn. Both at %d requests per second, open-loop Poisson from one "+
		"connection, latency from each request's planned send time, Reach-Deadline = plan + %v; the methods take turns, "+
		"%d rounds of %v, who goes first alternating. A fan-out must wait for the slowest of its ten branches, so its p50 "+
		"is the median of a maximum of ten.", fanCapability(0), fanCapability(fanBranches-1), fanSlots, fanService,
		fanTimeout.Milliseconds(), fanRate, fanTimeout, rounds, dur)
	r.goal("fanout_p50_ratio", fmt.Sprintf("fan-out of %d branches p50 ≤ 1.5 × one routed call's: %.2f (%.2f vs %.2f ms)",
		fanBranches, fig("fanout_p50_ratio"), fig("fanout_p50_ms"), fig("fanout_single_p50_ms")), fig("fanout_p50_ratio") <= 1.5)
	return nil
}
