package bench

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// latency is the outcome of one load run. Every request that was sent is in
// the histogram: answered ones at their latency, timed-out and failed ones
// at the timeout, so a method cannot look fast by dropping requests.
type latency struct {
	hist     *hdrhistogram.Histogram // microseconds
	ok       int64
	timeouts int64            // no answer within the timeout
	errors   int64            // an error answer (Reach-Error, no responders, publish error)
	codes    map[string]int64 // errors by Reach-Error code ("503" for no responders)
	// lag is how late the generator sent each request after its intended
	// time (open loop only): the part of the latency that is the load
	// generator's own, e.g. waiting for a core.
	lag     *hdrhistogram.Histogram
	elapsed time.Duration
	cpu     time.Duration // process CPU time used during elapsed
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 120_000_000, 3) }

func newLatency() *latency {
	return &latency{hist: newHist(), codes: map[string]int64{}, lag: newHist()}
}

// errorCode names the error of a failed reply.
func errorCode(m *nats.Msg) string {
	if c := m.Header.Get(streams.HeaderError); c != "" {
		return c
	}
	return m.Header.Get("Status")
}

// add merges o, more of the same method's load measured at another time or
// by another caller, into l.
func (l *latency) add(o *latency) {
	l.hist.Merge(o.hist)
	l.lag.Merge(o.lag)
	l.ok += o.ok
	l.timeouts += o.timeouts
	l.errors += o.errors
	for c, n := range o.codes {
		l.codes[c] += n
	}
	l.elapsed += o.elapsed
	l.cpu += o.cpu
}

// p returns the q-th percentile (q in [0, 100]).
func (l *latency) p(q float64) time.Duration {
	return time.Duration(l.hist.ValueAtQuantile(q)) * time.Microsecond
}

func (l *latency) sent() int64   { return l.ok + l.timeouts + l.errors }
func (l *latency) failed() int64 { return l.timeouts + l.errors }

// rps is the rate of answered requests.
func (l *latency) rps() float64 { return ratio(float64(l.ok), l.elapsed.Seconds()) }

// cores is the process CPU used per second of wall time.
func (l *latency) cores() float64 { return ratio(l.cpu.Seconds(), l.elapsed.Seconds()) }

func (l *latency) String() string {
	s := fmt.Sprintf("ok=%d timeouts=%d errors=%d rps=%.0f p50=%v p99=%v p99.9=%v cpu=%.2f cores",
		l.ok, l.timeouts, l.errors, l.rps(), l.p(50), l.p(99), l.p(99.9), l.cores())
	if l.lag.TotalCount() > 0 {
		s += fmt.Sprintf(" send-lag p50=%v p99=%v", time.Duration(l.lag.ValueAtQuantile(50))*time.Microsecond,
			time.Duration(l.lag.ValueAtQuantile(99))*time.Microsecond)
	}
	if len(l.codes) > 0 {
		s += fmt.Sprintf(" error codes %v", l.codes)
	}
	return s
}

// isFailure reports whether a reply is an error: a Reach-Error code or the
// server's "no responders" status.
func isFailure(m *nats.Msg) bool {
	if m.Header == nil {
		return false
	}
	return m.Header.Get(streams.HeaderError) != "" || (len(m.Data) == 0 && m.Header.Get("Status") == "503")
}

// isProgress reports whether a reply is an agent's ACKED or PROCESSING
// status rather than an answer (seen when calling an agent directly).
func isProgress(m *nats.Msg) bool {
	if m.Header == nil {
		return false
	}
	s := streams.Status(m.Header.Get(streams.HeaderStatus))
	return s == streams.StatusAcked || s == streams.StatusProcessing
}

// request builds the message of one call: reply is where the answer must
// go, intended the call's planned send time.
type request func(reply string, intended time.Time) *nats.Msg

// openSpec is one open-loop run.
type openSpec struct {
	step    string // for progress and logs
	rate    float64
	dur     time.Duration
	timeout time.Duration
	build   request
	// started, when set, is called with the planned time of the first call
	// just before the load begins.
	started func(time.Time)
	// answered, when set, is called with every answer counted as a
	// success and its latency, on the inbox's goroutine.
	answered func(m *nats.Msg, lat time.Duration)
	// precise paces with a locked thread sleeping in nanosleep, which sends
	// within tens of microseconds of the plan but keeps one of the
	// process's Ps while it sleeps (Go gets it back only when sysmon
	// notices, up to 10 ms later). Without it, Go's timers pace: sends may
	// be up to about 1 ms late (send_lag shows it, and latency is counted
	// from the plan), but the system under test keeps every P. The overhead
	// scenario, whose latencies are tens of microseconds, needs precise; the
	// skew scenario, whose tails are tens of milliseconds and which was
	// measured to lose up to half its p99 to the held P at 5,000 req/s,
	// does not.
	precise bool
}

// openLoop offers s.rate requests per second with Poisson arrivals for
// s.dur on nc, whatever the answers do, and measures each latency from the
// request's intended send time: a stall of the system or the generator
// delays every request planned during it, and the histogram shows it
// (no coordinated omission). Answers arrive on one wildcard inbox; an
// answer later than s.timeout is a timeout.
func (r *run) openLoop(nc *nats.Conn, s openSpec) (*latency, error) {
	n := max(int(s.rate*s.dur.Seconds()), 1)
	offs := make([]time.Duration, n)
	rng := rand.New(rand.NewPCG(uint64(n), uint64(s.rate*1000)))
	var t time.Duration
	for i := range offs {
		t += time.Duration(rng.ExpFloat64() / s.rate * float64(time.Second))
		offs[i] = t
	}
	state := make([]atomic.Uint32, n) // 0 waiting, 1 accounted for
	res := newLatency()
	var mu sync.Mutex
	var done, sent atomic.Int64
	timeoutUS := s.timeout.Microseconds()
	record := func(us int64, outcome *int64) {
		mu.Lock()
		*outcome++
		_ = res.hist.RecordValue(max(us, 1))
		mu.Unlock()
		done.Add(1)
	}

	start := time.Now().Add(20 * time.Millisecond)
	prefix := nats.NewInbox() + "."
	sub, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		if isProgress(m) {
			return
		}
		seq, err := strconv.Atoi(m.Subject[len(prefix):])
		if err != nil || seq < 0 || seq >= n || !state[seq].CompareAndSwap(0, 1) {
			return
		}
		lat := time.Since(start.Add(offs[seq]))
		switch {
		case lat > s.timeout:
			record(timeoutUS, &res.timeouts)
		case isFailure(m):
			mu.Lock()
			res.codes[errorCode(m)]++
			mu.Unlock()
			record(timeoutUS, &res.errors)
		default:
			record(lat.Microseconds(), &res.ok)
			if s.answered != nil {
				s.answered(m, lat)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		return nil, err
	}
	r.prog.begin(s.step, func() string {
		return fmt.Sprintf("%.0f req/s offered, %d/%d sent, %d answered", s.rate, sent.Load(), n, done.Load())
	})
	if s.started != nil {
		s.started(start.Add(offs[0]))
	}

	cpu0 := processCPU()
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		sleep := time.Sleep
		if s.precise {
			pacerThread()
			sleep = pacerSleep
		}
		for i := range n {
			due := start.Add(offs[i])
			for d := time.Until(due); d > 0; d = time.Until(due) {
				if r.ctx.Err() != nil {
					return
				}
				sleep(min(d, 50*time.Millisecond))
			}
			if r.ctx.Err() != nil {
				return
			}
			if err := nc.PublishMsg(s.build(prefix+strconv.Itoa(i), due)); err != nil && state[i].CompareAndSwap(0, 1) {
				record(timeoutUS, &res.errors)
			}
			_ = res.lag.RecordValue(max(time.Since(due).Microseconds(), 1))
			sent.Add(1)
		}
	}()
	<-sendDone
	res.elapsed = time.Since(start)
	res.cpu = processCPU() - cpu0

	last := int(sent.Load())
	if last > 0 {
		giveUp := start.Add(offs[last-1] + s.timeout + 20*time.Millisecond)
		r.poll(time.Until(giveUp), func() bool { return done.Load() >= int64(last) })
	}
	for i := range last {
		if state[i].CompareAndSwap(0, 1) {
			record(timeoutUS, &res.timeouts)
		}
	}
	// An answer that won its slot just before the sweep may still be
	// recording; wait for it so res is complete.
	r.poll(time.Second, func() bool { return done.Load() >= int64(last) })
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	return res, nil
}

// closedSpec is one closed-loop run.
type closedSpec struct {
	step    string
	callers int
	dur     time.Duration
	timeout time.Duration
	build   func() *nats.Msg
}

// closedLoop runs s.callers callers, spread over conns, each sending its
// next request as soon as the previous one is answered, for s.dur: the
// maximum throughput at that concurrency.
func (r *run) closedLoop(conns []*nats.Conn, s closedSpec) (*latency, error) {
	res := newLatency()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var count atomic.Int64
	r.prog.begin(s.step, func() string { return fmt.Sprintf("%d callers, %d answered", s.callers, count.Load()) })
	cpu0 := processCPU()
	start := time.Now()
	end := start.Add(s.dur)
	for c := range s.callers {
		nc := conns[c%len(conns)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := newLatency()
			for time.Now().Before(end) && r.ctx.Err() == nil {
				t0 := time.Now()
				reply, err := nc.RequestMsg(s.build(), s.timeout)
				lat := time.Since(t0)
				switch {
				case err == nats.ErrTimeout:
					mine.timeouts++
					lat = s.timeout
				case err != nil:
					mine.errors++
					mine.codes[err.Error()]++
					lat = s.timeout
				case isFailure(reply):
					mine.errors++
					mine.codes[errorCode(reply)]++
					lat = s.timeout
				default:
					mine.ok++
					count.Add(1)
				}
				_ = mine.hist.RecordValue(max(lat.Microseconds(), 1))
			}
			mu.Lock()
			res.add(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.cpu = processCPU() - cpu0
	return res, r.ctx.Err()
}
