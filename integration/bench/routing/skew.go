package routing

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

const (
	skewAgents  = 8
	skewSlots   = 4
	skewMean    = 2 * time.Millisecond
	skewTimeout = time.Second
	// A method sustains a rate when its p99 stays within this and no
	// request times out or fails.
	skewSustainP99 = 50 * time.Millisecond
	skewHeadline   = 1000.0
	replyHeader    = "Bench-Reply"
)

func sustained(l *harness.Latency) bool { return l.Failed() == 0 && l.P(99) <= skewSustainP99 }

// runSkew compares the methods on eight agents of unequal speed.
func Skew(r *harness.Run) error {
	e, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.Close()
	caller, err := e.Connect("caller")
	if err != nil {
		return err
	}
	dur := harness.Pick(r, 5*time.Second, 500*time.Millisecond)
	clock := &stallClock{
		offset: harness.Pick(r, time.Second, 100*time.Millisecond),
		period: harness.Pick(r, 5*time.Second, time.Second),
		length: harness.Pick(r, 2*time.Second, 300*time.Millisecond),
	}
	rates := harness.Pick(r, []float64{250, 500, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 8000}, []float64{250, 1000, 2000})
	compare := harness.Pick(r, []float64{500, 1000, 2000}, []float64{1000})
	point := 0
	measure := func(m skewMethod, p *skewProfile, rate float64) (*harness.Latency, error) {
		point++
		runtime.GC()
		build, stop, err := m.setup(r, e, p, point)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		defer stop()
		l, err := r.OpenLoop(caller, harness.OpenSpec{
			Step: fmt.Sprintf("%s, %s, %.0f req/s", p.v.name, m.name, rate),
			Rate: rate, Dur: dur, Timeout: skewTimeout, Build: build, Started: clock.arm,
		})
		if err != nil {
			return nil, err
		}
		r.Logf("skew %s %s %.0f req/s: %v", p.v.name, m.name, rate, l)
		return l, nil
	}
	setMethod := func(prefix, method string, l *harness.Latency) {
		r.Set(prefix+method+"_p50_ms", harness.Millis(l.P(50)))
		r.Set(prefix+method+"_p99_ms", harness.Millis(l.P(99)))
		r.Set(prefix+method+"_p999_ms", harness.Millis(l.P(99.9)))
		r.Set(prefix+method+"_timeouts", float64(l.Timeouts))
		r.Set(prefix+method+"_errors", float64(l.Errors))
	}
	fig := func(k string) float64 { return r.Rep.Figures[k] }

	// one_slow: every method stepped up in rate until it fails to sustain
	// two steps in a row (one failure can be noise: a p99 from a few
	// thousand samples); its maximum is the highest step it sustained.
	// Before its first sustained step, only a step with failed requests
	// counts: a spread-evenly method's p99 sits on the line at low rates
	// (see the note), which is no sign of saturation. The compare rates are
	// always measured. The rates are the outer loop: every method's point
	// at a rate is measured within seconds of the others', so a stretch of
	// minutes in which the machine runs slower does not fall on one
	// method's ladder alone.
	oneSlow := &skewProfile{v: skewVariants[0], clock: clock}
	type ladder struct {
		fails   int
		maxRate float64
		byRate  map[float64]*harness.Latency
		rows    [][]string
	}
	ladders := map[string]*ladder{}
	for _, m := range skewMethods {
		ladders[m.name] = &ladder{byRate: map[float64]*harness.Latency{}}
	}
	for _, rate := range rates {
		for _, m := range skewMethods {
			ld := ladders[m.name]
			stepping := ld.fails < 2
			if !stepping && !slices.Contains(compare, rate) {
				continue
			}
			l, err := measure(m, oneSlow, rate)
			if err != nil {
				return err
			}
			ld.byRate[rate] = l
			ok := sustained(l)
			switch {
			case stepping && ok:
				ld.maxRate, ld.fails = rate, 0
			case stepping && (ld.maxRate > 0 || l.Failed() > 0):
				ld.fails++
			}
			ld.rows = append(ld.rows, []string{m.name, harness.Cell(rate), harness.Cell(harness.Millis(l.P(50))), harness.Cell(harness.Millis(l.P(99))), harness.Cell(harness.Millis(l.P(99.9))),
				fmt.Sprint(l.Timeouts), fmt.Sprint(l.Errors), yesNo(ok)})
		}
	}
	var sweepRows [][]string
	for _, m := range skewMethods {
		ld := ladders[m.name]
		sweepRows = append(sweepRows, ld.rows...)
		r.Set(m.name+"_max_rate", ld.maxRate)
		setMethod("", m.name, ld.byRate[skewHeadline])
		for _, rate := range compare {
			r.Set(fmt.Sprintf("%s_p99_ms_at_%.0f", m.name, rate), harness.Millis(ld.byRate[rate].P(99)))
		}
	}
	r.Set("p99_ratio_vs_queue_group", harness.Ratio(fig("least_load_p99_ms"), fig("queue_group_p99_ms")))
	r.Set("p99_ratio_vs_pull", harness.Ratio(fig("least_load_p99_ms"), fig("pull_p99_ms")))
	// "At every load": every rate at which both were measured.
	worstVsPull, worstAt := 0.0, 0.0
	var both []float64
	for _, rate := range rates {
		ll, pull := ladders["least_load"].byRate[rate], ladders["pull"].byRate[rate]
		if ll == nil || pull == nil {
			continue
		}
		both = append(both, rate)
		v := harness.Ratio(harness.Millis(ll.P(99)), harness.Millis(pull.P(99)))
		r.Set(fmt.Sprintf("p99_ratio_vs_pull_at_%.0f", rate), v)
		if v > worstVsPull {
			worstVsPull, worstAt = v, rate
		}
	}
	r.Set("p99_ratio_vs_pull_max", worstVsPull)
	r.Set("p99_ratio_vs_pull_max_at_rps", worstAt)
	qgMax := fig("queue_group_max_rate")
	lowerBound := qgMax == 0
	if lowerBound {
		// The queue group sustained not even the lowest step: compare with
		// that step, which makes the ratio a lower bound.
		qgMax = rates[0]
		r.Note("queue_group sustained none of the rates (its p99 exceeded %v or requests failed even at %.0f req/s); "+
			"max_rate_ratio_vs_queue_group is computed against that lowest step and is a lower bound.", skewSustainP99, rates[0])
	}
	r.Set("max_rate_ratio_vs_queue_group", fig("least_load_max_rate")/qgMax)
	r.Set("max_rate_ratio_is_lower_bound", harness.B2F(lowerBound))
	r.Set("offered_rps", skewHeadline)

	// The other variants at the headline rate.
	var varRows [][]string
	for _, m := range skewMethods {
		l := ladders[m.name].byRate[skewHeadline]
		varRows = append(varRows, []string{"one_slow", m.name, harness.Cell(harness.Millis(l.P(50))), harness.Cell(harness.Millis(l.P(99))), harness.Cell(harness.Millis(l.P(99.9))),
			fmt.Sprint(l.Timeouts), fmt.Sprint(l.Errors)})
	}
	for _, v := range skewVariants[1:] {
		p := &skewProfile{v: v, clock: clock}
		for _, m := range skewMethods {
			l, err := measure(m, p, skewHeadline)
			if err != nil {
				return err
			}
			setMethod(v.prefix, m.name, l)
			varRows = append(varRows, []string{v.name, m.name, harness.Cell(harness.Millis(l.P(50))), harness.Cell(harness.Millis(l.P(99))), harness.Cell(harness.Millis(l.P(99.9))),
				fmt.Sprint(l.Timeouts), fmt.Sprint(l.Errors)})
		}
		r.Set(v.prefix+"p99_ratio_vs_queue_group", harness.Ratio(fig(v.prefix+"least_load_p99_ms"), fig(v.prefix+"queue_group_p99_ms")))
		r.Set(v.prefix+"p99_ratio_vs_pull", harness.Ratio(fig(v.prefix+"least_load_p99_ms"), fig(v.prefix+"pull_p99_ms")))
	}
	r.Set("point_seconds", dur.Seconds())
	r.Set("timeout_ms", harness.Millis(skewTimeout))
	r.Set("stall_ms", harness.Millis(clock.length))
	r.Set("stall_period_ms", harness.Millis(clock.period))

	r.AddTable(fmt.Sprintf("skew: %.0f req/s offered, Poisson, %v timeout (latencies in ms)", skewHeadline, skewTimeout),
		[]string{"variant", "method", "p50", "p99", "p99.9", "timeouts", "errors"}, varRows)
	r.AddTable(fmt.Sprintf("skew one_slow: stepping the offered rate (sustained = p99 ≤ %v, nothing failed; "+
		"a method stops after two unsustained steps in a row, counting before its first sustained step only steps with failures)", skewSustainP99),
		[]string{"method", "req/s", "p50", "p99", "p99.9", "timeouts", "errors", "sustained"}, sweepRows)
	var maxRows [][]string
	for _, m := range skewMethods {
		maxRows = append(maxRows, []string{m.name, harness.Cell(fig(m.name + "_max_rate")), m.about})
	}
	r.AddTable("skew one_slow: highest sustained rate", []string{"method", "req/s", "how"}, maxRows)

	r.Note("Service times are exponential with mean %v (sleeps that end early when the task's context does); "+
		"one_slow: agent 0 is 10× slower; three_slow: agents 0-2 are 3× slower; stall: agent 0 stops for %v at a time, "+
		"every %v, the first stall %v into each run. Go timers round sleeps below 1 ms up to about 1 ms, so the "+
		"effective fast mean is nearer 2.3 ms — the same for every method.", skewMean, clock.length, clock.period, clock.offset)
	r.Note("Load is open-loop Poisson from one caller connection, %v per point, every point on freshly started "+
		"agents; at each rate the methods run one after another, before the next rate. A request unanswered after "+
		"%v counts as a timeout and at %v in the percentiles. The generator paces "+
		"with Go's timers, so a request may leave up to about 1 ms after its planned time (its latency counts from the "+
		"plan, for every method alike); the overhead scenario's precise pacer keeps a thread and one of the two Ps "+
		"asleep in nanosleep, which here was measured to take up to half of every method's p99 at 5,000 req/s.",
		dur, skewTimeout, skewTimeout)
	r.Note("The pull work-queue uses a memory stream (its best case; a file stream adds storage cost) and publishes " +
		"with core NATS, reply inbox in a header. Dispatcher requests carry Reach-Deadline, so a stalled agent's " +
		"handler is cancelled at the caller's deadline; the queue group and pull workers have no such signal.")
	r.Note("With one agent 10× slower and an even spread (queue group, round robin), 1 task in 8 takes an "+
		"exponential time of mean 20 ms, whose 92nd percentile is 50.5 ms: the overall p99 sits on the %v line at "+
		"any load, so whether those methods sustain a low rate is close to a coin toss.", skewSustainP99)
	r.Note("Headline figures are variant one_slow at %.0f req/s; other variants' figures carry their prefix "+
		"(three_slow_, stall_).", skewHeadline)
	r.Goal("skew_p99_vs_queue_group", fmt.Sprintf("least-load p99 ≤ 0.33 × queue group p99 (one_slow, %.0f req/s): %.2f (%.1f ms vs %.1f ms)",
		skewHeadline, fig("p99_ratio_vs_queue_group"), fig("least_load_p99_ms"), fig("queue_group_p99_ms")),
		fig("p99_ratio_vs_queue_group") <= 0.33)
	r.Goal("skew_p99_vs_pull", fmt.Sprintf("least-load p99 ≤ 1.2 × pull p99 at every load (%v req/s): worst %.2f at %.0f req/s",
		both, worstVsPull, worstAt), worstVsPull <= 1.2)
	r.Goal("skew_max_rate", fmt.Sprintf("least-load sustained rate ≥ 5 × queue group's: %.0f vs %.0f req/s = %.1f×%s",
		fig("least_load_max_rate"), fig("queue_group_max_rate"), fig("max_rate_ratio_vs_queue_group"),
		map[bool]string{true: " (lower bound)", false: ""}[lowerBound]), fig("max_rate_ratio_vs_queue_group") >= 5)
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
