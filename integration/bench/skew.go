package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
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

// skewVariant says how much slower each of the eight agents is, and whether
// agent 0 stalls periodically.
type skewVariant struct {
	name    string
	prefix  string // of its figure keys
	factors [skewAgents]float64
	stall   bool
	about   string
}

var skewVariants = []skewVariant{
	{name: "one_slow", factors: [skewAgents]float64{10, 1, 1, 1, 1, 1, 1, 1}, about: "1 of 8 agents 10× slower"},
	{name: "three_slow", prefix: "three_slow_", factors: [skewAgents]float64{3, 3, 3, 1, 1, 1, 1, 1}, about: "3 of 8 agents 3× slower"},
	{name: "stall", prefix: "stall_", factors: [skewAgents]float64{1, 1, 1, 1, 1, 1, 1, 1}, stall: true,
		about: "1 of 8 agents stalls periodically"},
}

// skewProfile is the service-time model of one variant: exponential times
// with mean 2 ms times the agent's factor, and for a stalling agent a
// periodic window in which every task waits for the window's end.
type skewProfile struct {
	v     skewVariant
	clock *stallClock
}

// serve spends agent i's service time for one task, ending early when ctx
// does.
func (p *skewProfile) serve(ctx context.Context, i int) error {
	if p.v.stall && i == 0 {
		if err := p.clock.wait(ctx); err != nil {
			return err
		}
	}
	return sleepCtx(ctx, time.Duration(rand.ExpFloat64()*float64(skewMean)*p.v.factors[i]))
}

// stallClock holds the stall windows: from start on, the first length of
// every period.
type stallClock struct {
	start          atomic.Int64 // unix ns; 0 = never stall
	offset         time.Duration
	period, length time.Duration
}

// arm puts the first window offset after t.
func (c *stallClock) arm(t time.Time) { c.start.Store(t.Add(c.offset).UnixNano()) }

func (c *stallClock) wait(ctx context.Context) error {
	s := c.start.Load()
	if s == 0 {
		return nil
	}
	el := time.Since(time.Unix(0, s))
	if el < 0 || el%c.period >= c.length {
		return nil
	}
	return sleepCtx(ctx, c.length-el%c.period)
}

// skewMethod sets up one way of spreading the work over the eight agents
// for one measurement point and returns how to build a request and how to
// tear it all down.
type skewMethod struct {
	name  string
	about string
	setup func(r *run, e *env, p *skewProfile, point int) (request, func(), error)
}

var skewMethods = []skewMethod{
	{name: "queue_group", about: "plain NATS queue group, 8 subscribers × 4 concurrent", setup: setupQueueGroup},
	{name: "pull", about: "JetStream work-queue, 8 workers × 4 slots, fetch when a slot is free", setup: setupPull},
	{name: "least_load", about: "dispatcher, least_load", setup: setupDispatched(dispatcher.StrategyLeastLoad)},
	{name: "round_robin", about: "dispatcher, round_robin", setup: setupDispatched(dispatcher.StrategyRoundRobin)},
}

var (
	skewPayload = []byte(`{"job":"score","n":42}`)
	jsonHeader  = nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}}
)

// setupQueueGroup: eight queue subscribers, each running up to four tasks
// at once; a message beyond that waits in its subscriber's pending queue,
// as with any real queue group.
func setupQueueGroup(r *run, e *env, p *skewProfile, point int) (request, func(), error) {
	subject := fmt.Sprintf("bench.skew.qg.%d", point)
	ctx, cancel := context.WithCancel(context.Background())
	var active atomic.Int64
	var conns []*nats.Conn
	stop := func() {
		cancel()
		for _, nc := range conns {
			nc.Close()
		}
		r.poll(2*time.Second, func() bool { return active.Load() == 0 })
	}
	for i := range skewAgents {
		nc, err := e.connect(fmt.Sprintf("qg-%d-%d", point, i))
		if err != nil {
			stop()
			return nil, nil, err
		}
		conns = append(conns, nc)
		slots := make(chan struct{}, skewSlots)
		sub, err := nc.QueueSubscribe(subject, "q", func(m *nats.Msg) {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			active.Add(1)
			go func() {
				defer func() {
					<-slots
					active.Add(-1)
				}()
				if p.serve(ctx, i) == nil {
					_ = nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: m.Data, Header: jsonHeader})
				}
			}()
		})
		if err == nil {
			err = sub.SetPendingLimits(-1, -1)
		}
		if err == nil {
			err = nc.Flush()
		}
		if err != nil {
			stop()
			return nil, nil, err
		}
	}
	build := func(reply string, _ time.Time) *nats.Msg {
		return &nats.Msg{Subject: subject, Reply: reply, Data: skewPayload, Header: jsonHeader}
	}
	return build, stop, nil
}

// setupPull: a memory work-queue stream with one durable pull consumer;
// each of eight workers runs four slots, and a slot fetches one message
// only when it is free. The reply inbox travels in a header.
func setupPull(r *run, e *env, p *skewProfile, point int) (request, func(), error) {
	name := fmt.Sprintf("BENCH_WQ_%d", point)
	subject := fmt.Sprintf("bench.skew.wq.%d", point)
	js, admin, err := e.js(fmt.Sprintf("wq-admin-%d", point))
	if err != nil {
		return nil, nil, err
	}
	cctx, ccancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer ccancel()
	if _, err := js.CreateStream(cctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage}); err != nil {
		admin.Close()
		return nil, nil, err
	}
	if _, err := js.CreateOrUpdateConsumer(cctx, name, jetstream.ConsumerConfig{Durable: "workers",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxWaiting: 512}); err != nil {
		admin.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var conns []*nats.Conn
	stop := func() {
		cancel()
		for _, nc := range conns {
			nc.Close()
		}
		waitGroup(&wg, 3*time.Second)
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = js.DeleteStream(dctx, name)
		dcancel()
		admin.Close()
	}
	for i := range skewAgents {
		nc, err := e.connect(fmt.Sprintf("wq-%d-%d", point, i))
		if err != nil {
			stop()
			return nil, nil, err
		}
		conns = append(conns, nc)
		wjs, err := jetstream.New(nc)
		if err != nil {
			stop()
			return nil, nil, err
		}
		cons, err := wjs.Consumer(cctx, name, "workers")
		if err != nil {
			stop()
			return nil, nil, err
		}
		for range skewSlots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					batch, err := cons.Fetch(1, jetstream.FetchMaxWait(500*time.Millisecond))
					if err != nil {
						if ctx.Err() == nil {
							time.Sleep(10 * time.Millisecond)
						}
						continue
					}
					for m := range batch.Messages() {
						if p.serve(ctx, i) == nil {
							_ = nc.PublishMsg(&nats.Msg{Subject: m.Headers().Get(replyHeader), Data: m.Data(), Header: jsonHeader})
						}
						_ = m.Ack()
					}
				}
			}()
		}
	}
	build := func(reply string, _ time.Time) *nats.Msg {
		h := nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}, replyHeader: []string{reply}}
		return &nats.Msg{Subject: subject, Data: skewPayload, Header: h}
	}
	return build, stop, nil
}

// setupDispatched: a dispatcher with the given strategy in front of eight
// agentkit agents with four slots each. Requests carry Reach-Deadline =
// intended send time + timeout, as agentkit.Client does for a caller with
// that deadline.
func setupDispatched(strategy string) func(r *run, e *env, p *skewProfile, point int) (request, func(), error) {
	return func(r *run, e *env, p *skewProfile, point int) (request, func(), error) {
		capability := fmt.Sprintf("skew.p%d", point)
		ds, err := r.startDispatcher(e, dispatcher.Config{DefaultStrategy: strategy}, false)
		if err != nil {
			return nil, nil, err
		}
		agents, err := r.startAgents(e, []string{capability}, fmt.Sprintf("skew%d", point), skewAgents, skewSlots, func(i int) agentkit.Handler {
			return func(ctx context.Context, req *agentkit.Request) (any, error) {
				if err := p.serve(ctx, i); err != nil {
					return nil, err
				}
				return req.Data, nil
			}
		})
		if err != nil {
			ds.stop()
			return nil, nil, err
		}
		stop := func() {
			agents.stop()
			ds.stop()
		}
		if err := r.waitRoutable(ds, capability, skewAgents); err != nil {
			stop()
			return nil, nil, err
		}
		subject := streams.Subjects{}.Task(capability)
		build := func(reply string, intended time.Time) *nats.Msg {
			h := nats.Header{
				streams.HeaderContentType: []string{streams.ContentTypeJSON},
				streams.HeaderDeadline:    []string{strconv.FormatInt(intended.Add(skewTimeout).UnixMilli(), 10)},
			}
			return &nats.Msg{Subject: subject, Reply: reply, Data: skewPayload, Header: h}
		}
		return build, stop, nil
	}
}

// waitGroup waits for wg up to timeout.
func waitGroup(wg *sync.WaitGroup, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

func sustained(l *latency) bool { return l.failed() == 0 && l.p(99) <= skewSustainP99 }

// runSkew compares the methods on eight agents of unequal speed.
func runSkew(r *run) error {
	e, err := startEnv(r.ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.close()
	caller, err := e.connect("caller")
	if err != nil {
		return err
	}
	dur := pick(r, 5*time.Second, 500*time.Millisecond)
	clock := &stallClock{
		offset: pick(r, time.Second, 100*time.Millisecond),
		period: pick(r, 5*time.Second, time.Second),
		length: pick(r, 2*time.Second, 300*time.Millisecond),
	}
	rates := pick(r, []float64{250, 500, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 8000}, []float64{250, 1000, 2000})
	compare := pick(r, []float64{500, 1000, 2000}, []float64{1000})
	point := 0
	measure := func(m skewMethod, p *skewProfile, rate float64) (*latency, error) {
		point++
		runtime.GC()
		build, stop, err := m.setup(r, e, p, point)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		defer stop()
		l, err := r.openLoop(caller, openSpec{
			step: fmt.Sprintf("%s, %s, %.0f req/s", p.v.name, m.name, rate),
			rate: rate, dur: dur, timeout: skewTimeout, build: build, started: clock.arm,
		})
		if err != nil {
			return nil, err
		}
		r.logf("skew %s %s %.0f req/s: %v", p.v.name, m.name, rate, l)
		return l, nil
	}
	setMethod := func(prefix, method string, l *latency) {
		r.set(prefix+method+"_p50_ms", ms(l.p(50)))
		r.set(prefix+method+"_p99_ms", ms(l.p(99)))
		r.set(prefix+method+"_p999_ms", ms(l.p(99.9)))
		r.set(prefix+method+"_timeouts", float64(l.timeouts))
		r.set(prefix+method+"_errors", float64(l.errors))
	}
	fig := func(k string) float64 { return r.rep.Figures[k] }

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
		byRate  map[float64]*latency
		rows    [][]string
	}
	ladders := map[string]*ladder{}
	for _, m := range skewMethods {
		ladders[m.name] = &ladder{byRate: map[float64]*latency{}}
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
			case stepping && (ld.maxRate > 0 || l.failed() > 0):
				ld.fails++
			}
			ld.rows = append(ld.rows, []string{m.name, f(rate), f(ms(l.p(50))), f(ms(l.p(99))), f(ms(l.p(99.9))),
				fmt.Sprint(l.timeouts), fmt.Sprint(l.errors), yesNo(ok)})
		}
	}
	var sweepRows [][]string
	for _, m := range skewMethods {
		ld := ladders[m.name]
		sweepRows = append(sweepRows, ld.rows...)
		r.set(m.name+"_max_rate", ld.maxRate)
		setMethod("", m.name, ld.byRate[skewHeadline])
		for _, rate := range compare {
			r.set(fmt.Sprintf("%s_p99_ms_at_%.0f", m.name, rate), ms(ld.byRate[rate].p(99)))
		}
	}
	r.set("p99_ratio_vs_queue_group", ratio(fig("least_load_p99_ms"), fig("queue_group_p99_ms")))
	r.set("p99_ratio_vs_pull", ratio(fig("least_load_p99_ms"), fig("pull_p99_ms")))
	// "At every load": every rate at which both were measured.
	worstVsPull, worstAt := 0.0, 0.0
	var both []float64
	for _, rate := range rates {
		ll, pull := ladders["least_load"].byRate[rate], ladders["pull"].byRate[rate]
		if ll == nil || pull == nil {
			continue
		}
		both = append(both, rate)
		v := ratio(ms(ll.p(99)), ms(pull.p(99)))
		r.set(fmt.Sprintf("p99_ratio_vs_pull_at_%.0f", rate), v)
		if v > worstVsPull {
			worstVsPull, worstAt = v, rate
		}
	}
	r.set("p99_ratio_vs_pull_max", worstVsPull)
	r.set("p99_ratio_vs_pull_max_at_rps", worstAt)
	qgMax := fig("queue_group_max_rate")
	lowerBound := qgMax == 0
	if lowerBound {
		// The queue group sustained not even the lowest step: compare with
		// that step, which makes the ratio a lower bound.
		qgMax = rates[0]
		r.note("queue_group sustained none of the rates (its p99 exceeded %v or requests failed even at %.0f req/s); "+
			"max_rate_ratio_vs_queue_group is computed against that lowest step and is a lower bound.", skewSustainP99, rates[0])
	}
	r.set("max_rate_ratio_vs_queue_group", fig("least_load_max_rate")/qgMax)
	r.set("max_rate_ratio_is_lower_bound", b2f(lowerBound))
	r.set("offered_rps", skewHeadline)

	// The other variants at the headline rate.
	var varRows [][]string
	for _, m := range skewMethods {
		l := ladders[m.name].byRate[skewHeadline]
		varRows = append(varRows, []string{"one_slow", m.name, f(ms(l.p(50))), f(ms(l.p(99))), f(ms(l.p(99.9))),
			fmt.Sprint(l.timeouts), fmt.Sprint(l.errors)})
	}
	for _, v := range skewVariants[1:] {
		p := &skewProfile{v: v, clock: clock}
		for _, m := range skewMethods {
			l, err := measure(m, p, skewHeadline)
			if err != nil {
				return err
			}
			setMethod(v.prefix, m.name, l)
			varRows = append(varRows, []string{v.name, m.name, f(ms(l.p(50))), f(ms(l.p(99))), f(ms(l.p(99.9))),
				fmt.Sprint(l.timeouts), fmt.Sprint(l.errors)})
		}
		r.set(v.prefix+"p99_ratio_vs_queue_group", ratio(fig(v.prefix+"least_load_p99_ms"), fig(v.prefix+"queue_group_p99_ms")))
		r.set(v.prefix+"p99_ratio_vs_pull", ratio(fig(v.prefix+"least_load_p99_ms"), fig(v.prefix+"pull_p99_ms")))
	}
	r.set("point_seconds", dur.Seconds())
	r.set("timeout_ms", ms(skewTimeout))
	r.set("stall_ms", ms(clock.length))
	r.set("stall_period_ms", ms(clock.period))

	r.addTable(fmt.Sprintf("skew: %.0f req/s offered, Poisson, %v timeout (latencies in ms)", skewHeadline, skewTimeout),
		[]string{"variant", "method", "p50", "p99", "p99.9", "timeouts", "errors"}, varRows)
	r.addTable(fmt.Sprintf("skew one_slow: stepping the offered rate (sustained = p99 ≤ %v, nothing failed; "+
		"a method stops after two unsustained steps in a row, counting before its first sustained step only steps with failures)", skewSustainP99),
		[]string{"method", "req/s", "p50", "p99", "p99.9", "timeouts", "errors", "sustained"}, sweepRows)
	var maxRows [][]string
	for _, m := range skewMethods {
		maxRows = append(maxRows, []string{m.name, f(fig(m.name + "_max_rate")), m.about})
	}
	r.addTable("skew one_slow: highest sustained rate", []string{"method", "req/s", "how"}, maxRows)

	r.note("Service times are exponential with mean %v (sleeps that end early when the task's context does); "+
		"one_slow: agent 0 is 10× slower; three_slow: agents 0-2 are 3× slower; stall: agent 0 stops for %v at a time, "+
		"every %v, the first stall %v into each run. Go timers round sleeps below 1 ms up to about 1 ms, so the "+
		"effective fast mean is nearer 2.3 ms — the same for every method.", skewMean, clock.length, clock.period, clock.offset)
	r.note("Load is open-loop Poisson from one caller connection, %v per point, every point on freshly started "+
		"agents; at each rate the methods run one after another, before the next rate. A request unanswered after "+
		"%v counts as a timeout and at %v in the percentiles. The generator paces "+
		"with Go's timers, so a request may leave up to about 1 ms after its planned time (its latency counts from the "+
		"plan, for every method alike); the overhead scenario's precise pacer keeps a thread and one of the two Ps "+
		"asleep in nanosleep, which here was measured to take up to half of every method's p99 at 5,000 req/s.",
		dur, skewTimeout, skewTimeout)
	r.note("The pull work-queue uses a memory stream (its best case; a file stream adds storage cost) and publishes " +
		"with core NATS, reply inbox in a header. Dispatcher requests carry Reach-Deadline, so a stalled agent's " +
		"handler is cancelled at the caller's deadline; the queue group and pull workers have no such signal.")
	r.note("With one agent 10× slower and an even spread (queue group, round robin), 1 task in 8 takes an "+
		"exponential time of mean 20 ms, whose 92nd percentile is 50.5 ms: the overall p99 sits on the %v line at "+
		"any load, so whether those methods sustain a low rate is close to a coin toss.", skewSustainP99)
	r.note("Headline figures are variant one_slow at %.0f req/s; other variants' figures carry their prefix "+
		"(three_slow_, stall_).", skewHeadline)
	r.goal("skew_p99_vs_queue_group", fmt.Sprintf("least-load p99 ≤ 0.33 × queue group p99 (one_slow, %.0f req/s): %.2f (%.1f ms vs %.1f ms)",
		skewHeadline, fig("p99_ratio_vs_queue_group"), fig("least_load_p99_ms"), fig("queue_group_p99_ms")),
		fig("p99_ratio_vs_queue_group") <= 0.33)
	r.goal("skew_p99_vs_pull", fmt.Sprintf("least-load p99 ≤ 1.2 × pull p99 at every load (%v req/s): worst %.2f at %.0f req/s",
		both, worstVsPull, worstAt), worstVsPull <= 1.2)
	r.goal("skew_max_rate", fmt.Sprintf("least-load sustained rate ≥ 5 × queue group's: %.0f vs %.0f req/s = %.1f×%s",
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
