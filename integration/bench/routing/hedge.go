package routing

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

const (
	hedgeAgents = 8
	hedgeSlots  = 4
	// A task takes a uniform time in [hedgeFastMin, hedgeFastMax); a share
	// hedgeStallShare of them takes hedgeStallFactor times as long.
	hedgeFastMin     = 2 * time.Millisecond
	hedgeFastMax     = 4 * time.Millisecond
	hedgeStallShare  = 0.02
	hedgeStallFactor = 100
	hedgeTimeout     = 2 * time.Second
	// hedgeSlowLine is where a call counts as a stall that no hedge rescued:
	// a quarter of the shortest stall.
	hedgeSlowLine = hedgeFastMin * hedgeStallFactor / 4
)

// hedgeMeanService is the mean task time with the stalls included.
func hedgeMeanService() time.Duration {
	fast := float64(hedgeFastMin+hedgeFastMax) / 2
	return time.Duration(fast * (1 - hedgeStallShare + hedgeStallShare*hedgeStallFactor))
}

// hedgeMethod is one way the same calls are routed: a capability of its
// own, served by the same agents, hedged or not.
type hedgeMethod struct {
	name, capability string
	hedge            *selection.HedgeConfig // nil: not hedged
	about            string
}

var hedgeMethods = []hedgeMethod{
	{name: "off", capability: "hedge.off", about: "no hedging"},
	{name: "p97", capability: "hedge.p97", hedge: &selection.HedgeConfig{},
		about: "hedged, defaults: after the learned 97th percentile, budget 5%"},
	{name: "p95", capability: "hedge.p95", hedge: &selection.HedgeConfig{Percentile: 0.95},
		about: "hedged after the learned 95th percentile (the first design's default), budget 5%"},
}

// hedgeRun is one method's merged load and what the dispatcher counted.
type hedgeRun struct {
	l               *harness.Latency
	hedged, refused int64
	queued          int64   // tasks that waited at the dispatcher for a free slot
	redirected      int64   // tasks delivered again elsewhere (TARGET_BUSY, no ACK, …)
	p99Lo, p99Hi    float64 // ms, round by round
	p999Lo, p999Hi  float64 // ms, round by round
	slow            int64   // calls over hedgeSlowLine
}

// runHedge measures hedged requests (issue 17): eight agents whose tasks
// take 2–4 ms but 2% stall 100× longer, at half their real capacity,
// routed without hedging and with hedging after the learned 97th (the
// default) and 95th percentile, the methods taking turns.
func Hedge(r *harness.Run) error {
	e, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.Close()
	hedges := map[string]selection.HedgeConfig{}
	var capabilities []string
	for _, m := range hedgeMethods {
		capabilities = append(capabilities, m.capability)
		if m.hedge != nil {
			hedges[m.capability] = *m.hedge
		}
	}
	ds, err := r.StartDispatcher(e, config.Config{Hedges: hedges}, false)
	if err != nil {
		return err
	}
	defer ds.Stop()
	var stalls, cancelled atomic.Int64
	agents, err := r.StartAgents(e, capabilities, "hedge", hedgeAgents, hedgeSlots, func(int) agentkit.Handler {
		return func(ctx context.Context, req *agentkit.Request) (any, error) {
			d := hedgeFastMin + rand.N(hedgeFastMax-hedgeFastMin)
			if rand.Float64() < hedgeStallShare {
				d *= hedgeStallFactor
				stalls.Add(1)
			}
			if err := harness.SleepCtx(ctx, d); err != nil {
				cancelled.Add(1)
				return nil, err
			}
			return req.Data, nil
		}
	})
	if err != nil {
		return err
	}
	defer agents.Stop()
	for _, m := range hedgeMethods {
		if err := r.WaitRoutable(ds, m.capability, hedgeAgents); err != nil {
			return err
		}
	}
	caller, err := e.Connect("hedge-caller")
	if err != nil {
		return err
	}
	mean := hedgeMeanService()
	capacity := float64(hedgeAgents*hedgeSlots) / mean.Seconds()
	rate := capacity / 2
	build := func(m hedgeMethod) harness.Request {
		subject := streams.Subjects{}.Task(m.capability)
		return func(reply string, intended time.Time) *nats.Msg {
			h := nats.Header{
				streams.HeaderContentType: []string{streams.ContentTypeJSON},
				streams.HeaderDeadline:    []string{strconv.FormatInt(intended.Add(hedgeTimeout).UnixMilli(), 10)},
			}
			return &nats.Msg{Subject: subject, Reply: reply, Data: harness.SkewPayload, Header: h}
		}
	}
	// won holds the latencies of the answers a hedge won, per method: at
	// about the hedge delay plus a fast task when the delay is learned
	// below the stalls.
	won := map[string]*hdrhistogram.Histogram{}
	for _, m := range hedgeMethods {
		won[m.name] = harness.NewHist()
	}
	load := func(step string, m hedgeMethod, dur time.Duration) (*harness.Latency, dispatcher.Stats, error) {
		s0 := ds.D.Stats()
		h := harness.NewHist()
		l, err := r.OpenLoop(caller, harness.OpenSpec{Step: step, Rate: rate, Dur: dur, Timeout: hedgeTimeout, Build: build(m),
			Answered: func(reply *nats.Msg, lat time.Duration) {
				if reply.Header.Get(streams.HeaderHedged) == "1" {
					_ = h.RecordValue(max(lat.Microseconds(), 1))
				}
			}})
		if err == nil && !strings.HasPrefix(step, "hedge: warm-up") {
			won[m.name].Merge(h)
		}
		s1 := ds.D.Stats()
		s1.Hedged -= s0.Hedged
		s1.HedgesOver -= s0.HedgesOver
		s1.Queued -= s0.Queued
		s1.Redirected -= s0.Redirected
		return l, s1, err
	}
	// Warm-up: each capability learns its latencies (a hedge waits for 20)
	// and fills its budget's window.
	for _, m := range hedgeMethods {
		if _, _, err := load("hedge: warm-up "+m.name, m, harness.Pick(r, 2*time.Second, 300*time.Millisecond)); err != nil {
			return err
		}
	}
	rounds := harness.Pick(r, 3, 1)
	dur := harness.Pick(r, 5*time.Second, time.Second)
	runs := map[string]*hedgeRun{}
	for _, m := range hedgeMethods {
		runs[m.name] = &hedgeRun{l: harness.NewLatency(), p99Lo: math.Inf(1), p99Hi: math.Inf(-1), p999Lo: math.Inf(1), p999Hi: math.Inf(-1)}
	}
	for round := range rounds {
		for k := range hedgeMethods {
			m := hedgeMethods[(k+round)%len(hedgeMethods)] // who goes first rotates
			l, st, err := load(fmt.Sprintf("hedge: %s, %.0f req/s, round %d of %d", m.name, rate, round+1, rounds), m, dur)
			if err != nil {
				return err
			}
			hr := runs[m.name]
			hr.l.Add(l)
			hr.hedged += st.Hedged
			hr.refused += st.HedgesOver
			hr.queued += st.Queued
			hr.redirected += st.Redirected
			p99, p999 := harness.Millis(l.P(99)), harness.Millis(l.P(99.9))
			hr.p99Lo, hr.p99Hi = min(hr.p99Lo, p99), max(hr.p99Hi, p99)
			hr.p999Lo, hr.p999Hi = min(hr.p999Lo, p999), max(hr.p999Hi, p999)
			r.Logf("hedge %s round %d: %v; %d hedges sent, %d refused by the budget, %d tasks queued for a slot, %d redirected",
				m.name, round+1, l, st.Hedged, st.HedgesOver, st.Queued, st.Redirected)
		}
	}
	var rows [][]string
	for _, m := range hedgeMethods {
		hr := runs[m.name]
		l := hr.l
		hr.slow = countAbove(l.Hist, hedgeSlowLine)
		k := "hedge_" + m.name + "_"
		r.Set(k+"p50_ms", harness.Millis(l.P(50)))
		r.Set(k+"p99_ms", harness.Millis(l.P(99)))
		r.Set(k+"p999_ms", harness.Millis(l.P(99.9)))
		r.Set(k+"p99_round_min_ms", hr.p99Lo)
		r.Set(k+"p99_round_max_ms", hr.p99Hi)
		r.Set(k+"p999_round_min_ms", hr.p999Lo)
		r.Set(k+"p999_round_max_ms", hr.p999Hi)
		r.Set(k+"timeouts", float64(l.Timeouts))
		r.Set(k+"errors", float64(l.Errors))
		r.Set(k+"calls", float64(l.Sent()))
		r.Set(k+"slow_calls", float64(hr.slow))
		r.Set(k+"hedges", float64(hr.hedged))
		r.Set(k+"hedges_refused", float64(hr.refused))
		r.Set(k+"queued", float64(hr.queued))
		r.Set(k+"redirected", float64(hr.redirected))
		r.Set(k+"extra_deliveries", harness.Ratio(float64(hr.hedged), float64(l.Sent())))
		r.Set(k+"refused_share", harness.Ratio(float64(hr.refused), float64(hr.hedged+hr.refused)))
		w := won[m.name]
		r.Set(k+"hedge_won", float64(w.TotalCount()))
		r.Set(k+"hedge_won_p50_ms", harness.MillisOfMicros(w.ValueAtQuantile(50)))
		r.Set(k+"hedge_won_p90_ms", harness.MillisOfMicros(w.ValueAtQuantile(90)))
		hedging := "—"
		if m.hedge != nil {
			hedging = fmt.Sprintf("%d sent (%.2f%% of calls), %d refused by the budget; %d won, at %s ms p50, %s ms p90", hr.hedged,
				100*harness.Ratio(float64(hr.hedged), float64(l.Sent())), hr.refused, w.TotalCount(),
				harness.Cell(harness.MillisOfMicros(w.ValueAtQuantile(50))), harness.Cell(harness.MillisOfMicros(w.ValueAtQuantile(90))))
		}
		rows = append(rows, []string{m.name, harness.Cell(harness.Millis(l.P(50))), harness.Cell(harness.Millis(l.P(99))), harness.Cell(hr.p99Lo) + "–" + harness.Cell(hr.p99Hi), harness.Cell(harness.Millis(l.P(99.9))),
			harness.Cell(hr.p999Lo) + "–" + harness.Cell(hr.p999Hi), fmt.Sprint(hr.slow), fmt.Sprint(hr.queued), fmt.Sprint(hr.redirected), fmt.Sprint(l.Timeouts), fmt.Sprint(l.Errors), hedging})
	}
	off, on, p95 := runs["off"], runs["p97"], runs["p95"]
	fig := func(k string) float64 { return r.Rep.Figures[k] }
	r.Set("hedge_p99_ratio", harness.Ratio(fig("hedge_p97_p99_ms"), fig("hedge_off_p99_ms")))
	r.Set("hedge_p999_ratio", harness.Ratio(fig("hedge_p97_p999_ms"), fig("hedge_off_p999_ms")))
	r.Set("hedge_extra_deliveries", fig("hedge_p97_extra_deliveries"))
	r.Set("hedge_p95_p99_ratio", harness.Ratio(fig("hedge_p95_p99_ms"), fig("hedge_off_p99_ms")))
	r.Set("hedge_offered_rps", rate)
	r.Set("hedge_capacity_rps", capacity)
	r.Set("hedge_mean_service_ms", harness.Millis(mean))
	r.Set("hedge_off_p97_ms", harness.Millis(off.l.P(97)))
	r.Set("hedge_stalls", float64(stalls.Load()))
	r.Set("hedge_cancelled_handlers", float64(cancelled.Load()))
	r.Set("hedge_point_seconds", dur.Seconds())
	r.Set("hedge_rounds", float64(rounds))

	r.AddTable(fmt.Sprintf("hedge: %d agents × %d slots, tasks %v–%v, %.0f%% stall %d× longer; open-loop Poisson at %.0f req/s "+
		"(half of %.0f), %d rounds of %v per method (latencies in ms)", hedgeAgents, hedgeSlots, hedgeFastMin, hedgeFastMax,
		100*hedgeStallShare, hedgeStallFactor, rate, capacity, rounds, dur),
		[]string{"method", "p50", "p99", "p99 by round", "p99.9", "p99.9 by round", fmt.Sprintf("> %v", hedgeSlowLine), "queued", "redirected", "timeouts", "errors", "hedges"}, rows)
	r.AddTable("hedge: summary", []string{"figure", "value"}, [][]string{
		{"hedge_p99_ratio (p97 hedging / none)", harness.Cell(fig("hedge_p99_ratio"))},
		{"hedge_p999_ratio (p97 hedging / none)", harness.Cell(fig("hedge_p999_ratio"))},
		{"hedge_extra_deliveries (hedges / calls, p97)", fmt.Sprintf("%.4f", fig("hedge_extra_deliveries"))},
		{"hedge_p97_refused_share (refused / (sent + refused))", fmt.Sprintf("%.3f", fig("hedge_p97_refused_share"))},
		{"hedge_p95_refused_share", fmt.Sprintf("%.3f", fig("hedge_p95_refused_share"))},
		{"hedge_p95_p99_ratio (p95 hedging / none)", harness.Cell(fig("hedge_p95_p99_ratio"))},
	})
	r.Note("Service time: uniform in [%v, %v), and for %.0f%% of tasks (drawn independently) %d× that, %v–%v; a "+
		"handler's sleep ends early when its task is cancelled (a hedge's loser gets a CANCEL). The mean with the "+
		"stalls is %.2f ms, so %d slots carry %.0f req/s at most and the load is half that, %.0f req/s, computed "+
		"from these parameters (Go's timers add a few tens of µs to each sleep, the same for every method).",
		hedgeFastMin, hedgeFastMax, 100*hedgeStallShare, hedgeStallFactor, hedgeFastMin*hedgeStallFactor,
		hedgeFastMax*hedgeStallFactor, harness.Millis(mean), hedgeAgents*hedgeSlots, capacity, rate)
	r.Note("One dispatcher and the same %d agentkit agents serve three capabilities, one per method: %s unhedged, "+
		"%s with config.Config.Hedges' defaults (delay = the learned 97th percentile of its deliveries' "+
		"latencies, budget 5%% of its deliveries over 10 s), %s hedged after the learned 95th percentile. Open-loop "+
		"Poisson from one connection, latency from each request's planned send time; requests carry Reach-Deadline "+
		"= plan + %v, and a request unanswered by then counts as a timeout, at %v in the percentiles. The methods "+
		"take turns, %d rounds of %v each, who goes first rotating; hedges and refusals are the dispatcher's "+
		"Stats().Hedged and hedges_refused over each method's own runs.", hedgeAgents, hedgeMethods[0].capability,
		hedgeMethods[1].capability, hedgeMethods[2].capability, hedgeTimeout, hedgeTimeout, rounds, dur)
	r.Note("Is the budget what stops hedges? p97: %d hedges sent, %d refused by the budget (%.1f%% of the hedges "+
		"wanted), %d calls over %v. p95: %d sent, %d refused (%.1f%%), %d calls over %v, p99.9 %.1f–%.1f ms round by "+
		"round against p97's %.1f–%.1f ms. A call over %v is a stall no hedge rescued: refused by the budget, or "+
		"not sent because no other instance had a free slot or the delay was not yet learned.",
		on.hedged, on.refused, 100*fig("hedge_p97_refused_share"), on.slow, hedgeSlowLine,
		p95.hedged, p95.refused, 100*fig("hedge_p95_refused_share"), p95.slow, hedgeSlowLine,
		p95.p999Lo, p95.p999Hi, on.p999Lo, on.p999Hi, hedgeSlowLine)
	if won["p97"].TotalCount()+won["p95"].TotalCount() == 0 {
		r.Note("No answer carried Reach-Hedged: 1 (hedge_*_hedge_won = 0). The agents answer callers directly " +
			"(Reach-Reply-To, the default), and only the dispatcher knows which delivery was the hedge, so the header " +
			"a dispatcher puts on a hedged answer (docs/reference.md, Hedged requests) never reaches the caller.")
	} else {
		r.Note("Answers a hedge won (Reach-Hedged: 1) took p50 %.1f / p90 %.1f ms with p97 and %.1f / %.1f ms with p95: "+
			"about the hedge delay plus a fast task.", fig("hedge_p97_hedge_won_p50_ms"), fig("hedge_p97_hedge_won_p90_ms"),
			fig("hedge_p95_hedge_won_p50_ms"), fig("hedge_p95_hedge_won_p90_ms"))
	}
	r.Note("The hedge delay is learned from the capability's last 256 deliveries, of which 2%% stalls is about 5; " +
		"the 97th percentile is the 8th slowest and the 95th the 13th. p99 and p99.9 by round show how often a run " +
		"falls out of the good state: a window holding that many slow deliveries puts the delay among the stalls, " +
		"hedges then come too late to cancel them, and the stalls keep entering the window. queued counts tasks " +
		"that waited at the dispatcher for a free slot, redirected those delivered again elsewhere.")
	r.Goal("hedge_p99_ratio", fmt.Sprintf("p99 with hedging ≤ 0.1 × without: %.3f (%.1f vs %.1f ms)",
		fig("hedge_p99_ratio"), fig("hedge_p97_p99_ms"), fig("hedge_off_p99_ms")), fig("hedge_p99_ratio") <= 0.1)
	r.Goal("hedge_extra_deliveries", fmt.Sprintf("hedges ≤ 5%% of calls: %.2f%% (%d of %d)",
		100*fig("hedge_extra_deliveries"), on.hedged, on.l.Sent()), fig("hedge_extra_deliveries") <= 0.05)
	return nil
}

// countAbove returns how many values of h are above d.
func countAbove(h *hdrhistogram.Histogram, d time.Duration) int64 {
	var n int64
	for _, b := range h.Distribution() {
		if b.From > d.Microseconds() {
			n += b.Count
		}
	}
	return n
}
