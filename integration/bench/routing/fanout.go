package routing

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
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/integration/bench/harness"
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
func FanOut(r *harness.Run) error {
	e, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.Close()
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
	handler := func(int) agentkit.Handler {
		return func(ctx context.Context, req *agentkit.Request) (any, error) {
			if err := harness.SleepCtx(ctx, fanService); err != nil {
				return nil, err
			}
			return req.Data, nil
		}
	}
	for k := range fanBranches {
		set, err := r.StartAgents(e, []string{fanCapability(k)}, fmt.Sprintf("fan%d", k), 1, fanSlots, handler)
		if err != nil {
			return err
		}
		defer set.Stop()
		if err := r.WaitRoutable(ds, fanCapability(k), 1); err != nil {
			return err
		}
	}
	caller, err := e.Connect("fan-caller")
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
			Payload: harness.SkewPayload, TimeoutMS: fanTimeout.Milliseconds()})
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
		build harness.Request
	}
	methods := []method{
		{"fanout", func(reply string, intended time.Time) *nats.Msg {
			return &nats.Msg{Subject: streams.Subjects{}.FanOut(), Reply: reply, Data: fanBody, Header: header(intended)}
		}},
		{"single", func(reply string, intended time.Time) *nats.Msg {
			k := int(next.Add(1) % fanBranches) // each capability in turn
			return &nats.Msg{Subject: streams.Subjects{}.Task(fanCapability(k)), Reply: reply, Data: harness.SkewPayload, Header: header(intended)}
		}},
	}
	for _, m := range methods {
		if _, err := r.OpenLoop(caller, harness.OpenSpec{Step: "fanout: warm-up " + m.name, Rate: fanRate,
			Dur: harness.Pick(r, time.Second, 300*time.Millisecond), Timeout: fanTimeout, Build: m.build}); err != nil {
			return err
		}
	}
	rounds := harness.Pick(r, 5, 2)
	dur := harness.Pick(r, 3*time.Second, 700*time.Millisecond)
	merged := map[string]*harness.Latency{}
	for _, m := range methods {
		merged[m.name] = harness.NewLatency()
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for round := range rounds {
		got := map[string]*harness.Latency{}
		for k := range methods {
			m := methods[(k+round)%len(methods)]
			l, err := r.OpenLoop(caller, harness.OpenSpec{Step: fmt.Sprintf("fanout: %s, %d req/s, round %d of %d", m.name, fanRate, round+1, rounds),
				Rate: fanRate, Dur: dur, Timeout: fanTimeout, Build: m.build})
			if err != nil {
				return err
			}
			got[m.name] = l
			merged[m.name].Add(l)
			r.Logf("fanout %s round %d: %v", m.name, round+1, l)
		}
		v := harness.Ratio(harness.Micros(got["fanout"].P(50)), harness.Micros(got["single"].P(50)))
		lo, hi = min(lo, v), max(hi, v)
	}
	fo, single := merged["fanout"], merged["single"]
	r.Set("fanout_p50_ms", harness.Millis(fo.P(50)))
	r.Set("fanout_p99_ms", harness.Millis(fo.P(99)))
	r.Set("fanout_p999_ms", harness.Millis(fo.P(99.9)))
	r.Set("fanout_single_p50_ms", harness.Millis(single.P(50)))
	r.Set("fanout_single_p99_ms", harness.Millis(single.P(99)))
	r.Set("fanout_single_p999_ms", harness.Millis(single.P(99.9)))
	r.Set("fanout_p50_ratio", harness.Ratio(harness.Micros(fo.P(50)), harness.Micros(single.P(50))))
	r.Set("fanout_p50_ratio_round_min", lo)
	r.Set("fanout_p50_ratio_round_max", hi)
	r.Set("fanout_p99_ratio", harness.Ratio(harness.Micros(fo.P(99)), harness.Micros(single.P(99))))
	r.Set("fanout_failed", float64(fo.Failed()))
	r.Set("fanout_single_failed", float64(single.Failed()))
	r.Set("fanout_branches", fanBranches)
	r.Set("fanout_offered_rps", fanRate)
	fig := func(k string) float64 { return r.Rep.Figures[k] }
	r.AddTable(fmt.Sprintf("fanout: %d branches over %d capabilities, agents answering in %v; open-loop Poisson at %d req/s "+
		"per method, %d rounds of %v (latencies in ms)", fanBranches, fanBranches, fanService, fanRate, rounds, dur),
		[]string{"method", "p50", "p99", "p99.9", "failed"},
		[][]string{
			{"fan-out (reach.fanout, mode all)", harness.Cell(harness.Millis(fo.P(50))), harness.Cell(harness.Millis(fo.P(99))), harness.Cell(harness.Millis(fo.P(99.9))), fmt.Sprint(fo.Failed())},
			{"one routed call (reach.task)", harness.Cell(harness.Millis(single.P(50))), harness.Cell(harness.Millis(single.P(99))), harness.Cell(harness.Millis(single.P(99.9))), fmt.Sprint(single.Failed())},
		})
	r.AddTable("fanout: summary", []string{"figure", "value"}, [][]string{
		{"fanout_p50_ratio (fan-out / one call)", harness.Cell(fig("fanout_p50_ratio"))},
		{fmt.Sprintf("… round by round, lowest–highest of %d", rounds), harness.Cell(lo) + "–" + harness.Cell(hi)},
		{"fanout_p99_ratio", harness.Cell(fig("fanout_p99_ratio"))},
	})
	r.Note("Ten capabilities %s…%s, each served by one agentkit agent (%d slots) whose handler sleeps %v; one dispatcher "+
		"with the dispatcher/fanout service beside it on its connection, as `agentreach up` runs them. The fan-out "+
		"method requests reach.fanout with one branch per capability (mode all, timeout_ms %d); the other calls "+
		"reach.task.<cap>, the ten capabilities in turn. Both at %d requests per second, open-loop Poisson from one "+
		"connection, latency from each request's planned send time, Reach-Deadline = plan + %v; the methods take turns, "+
		"%d rounds of %v, who goes first alternating. A fan-out must wait for the slowest of its ten branches, so its p50 "+
		"is the median of a maximum of ten.", fanCapability(0), fanCapability(fanBranches-1), fanSlots, fanService,
		fanTimeout.Milliseconds(), fanRate, fanTimeout, rounds, dur)
	r.Goal("fanout_p50_ratio", fmt.Sprintf("fan-out of %d branches p50 ≤ 1.5 × one routed call's: %.2f (%.2f vs %.2f ms)",
		fanBranches, fig("fanout_p50_ratio"), fig("fanout_p50_ms"), fig("fanout_single_p50_ms")), fig("fanout_p50_ratio") <= 1.5)
	return nil
}
