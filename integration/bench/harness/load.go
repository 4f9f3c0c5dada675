package harness

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

// Latency is the outcome of one load run. Every request that was sent is in
// the histogram: answered ones at their latency, timed-out and failed ones
// at the timeout, so a method cannot look fast by dropping requests.
type Latency struct {
	Hist     *hdrhistogram.Histogram // microseconds
	OK       int64
	Timeouts int64            // no answer within the timeout
	Errors   int64            // an error answer (Reach-Error, no responders, publish error)
	Codes    map[string]int64 // errors by Reach-Error code ("503" for no responders)
	// Lag is how late the generator sent each request after its intended
	// time (open loop only): the part of the latency that is the load
	// generator's own, e.g. waiting for a core.
	Lag     *hdrhistogram.Histogram
	Elapsed time.Duration
	CPU     time.Duration // process CPU time used during elapsed
}

func NewHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 120_000_000, 3) }

func NewLatency() *Latency {
	return &Latency{Hist: NewHist(), Codes: map[string]int64{}, Lag: NewHist()}
}

// ErrorCode names the error of a failed reply.
func ErrorCode(m *nats.Msg) string {
	if c := m.Header.Get(streams.HeaderError); c != "" {
		return c
	}
	return m.Header.Get("Status")
}

// Add merges o, more of the same method's load measured at another time or
// by another caller, into l.
func (l *Latency) Add(o *Latency) {
	l.Hist.Merge(o.Hist)
	l.Lag.Merge(o.Lag)
	l.OK += o.OK
	l.Timeouts += o.Timeouts
	l.Errors += o.Errors
	for c, n := range o.Codes {
		l.Codes[c] += n
	}
	l.Elapsed += o.Elapsed
	l.CPU += o.CPU
}

// P returns the q-th percentile (q in [0, 100]).
func (l *Latency) P(q float64) time.Duration {
	return time.Duration(l.Hist.ValueAtQuantile(q)) * time.Microsecond
}

func (l *Latency) Sent() int64   { return l.OK + l.Timeouts + l.Errors }
func (l *Latency) Failed() int64 { return l.Timeouts + l.Errors }

// rps is the rate of answered requests.
func (l *Latency) RPS() float64 { return Ratio(float64(l.OK), l.Elapsed.Seconds()) }

// Cores is the process CPU used per second of wall time.
func (l *Latency) Cores() float64 { return Ratio(l.CPU.Seconds(), l.Elapsed.Seconds()) }

func (l *Latency) String() string {
	s := fmt.Sprintf("ok=%d timeouts=%d errors=%d rps=%.0f p50=%v p99=%v p99.9=%v cpu=%.2f cores",
		l.OK, l.Timeouts, l.Errors, l.RPS(), l.P(50), l.P(99), l.P(99.9), l.Cores())
	if l.Lag.TotalCount() > 0 {
		s += fmt.Sprintf(" send-lag p50=%v p99=%v", time.Duration(l.Lag.ValueAtQuantile(50))*time.Microsecond,
			time.Duration(l.Lag.ValueAtQuantile(99))*time.Microsecond)
	}
	if len(l.Codes) > 0 {
		s += fmt.Sprintf(" error codes %v", l.Codes)
	}
	return s
}

// IsFailure reports whether a reply is an error: a Reach-Error code or the
// server's "no responders" status.
func IsFailure(m *nats.Msg) bool {
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

// Request builds the message of one call: reply is where the answer must
// go, intended the call's planned send time.
type Request func(reply string, intended time.Time) *nats.Msg

// OpenSpec is one open-loop run.
type OpenSpec struct {
	Step    string // for progress and logs
	Rate    float64
	Dur     time.Duration
	Timeout time.Duration
	Build   Request
	// Started, when set, is called with the planned time of the first call
	// just before the load begins.
	Started func(time.Time)
	// Answered, when set, is called with every answer counted as a
	// success and its latency, on the inbox's goroutine.
	Answered func(m *nats.Msg, lat time.Duration)
	// Precise paces with a locked thread sleeping in nanosleep, which sends
	// within tens of microseconds of the plan but keeps one of the
	// process's Ps while it sleeps (Go gets it back only when sysmon
	// notices, up to 10 ms later). Without it, Go's timers pace: sends may
	// be up to about 1 ms late (send_lag shows it, and latency is counted
	// from the plan), but the system under test keeps every P. The overhead
	// scenario, whose latencies are tens of microseconds, needs precise; the
	// skew scenario, whose tails are tens of milliseconds and which was
	// measured to lose up to half its p99 to the held P at 5,000 req/s,
	// does not.
	Precise bool
}

// OpenLoop offers s.rate requests per second with Poisson arrivals for
// s.dur on nc, whatever the answers do, and measures each latency from the
// request's intended send time: a stall of the system or the generator
// delays every request planned during it, and the histogram shows it
// (no coordinated omission). Answers arrive on one wildcard inbox; an
// answer later than s.timeout is a timeout.
func (r *Run) OpenLoop(nc *nats.Conn, s OpenSpec) (*Latency, error) {
	n := max(int(s.Rate*s.Dur.Seconds()), 1)
	offs := make([]time.Duration, n)
	rng := rand.New(rand.NewPCG(uint64(n), uint64(s.Rate*1000)))
	var t time.Duration
	for i := range offs {
		t += time.Duration(rng.ExpFloat64() / s.Rate * float64(time.Second))
		offs[i] = t
	}
	state := make([]atomic.Uint32, n) // 0 waiting, 1 accounted for
	res := NewLatency()
	var mu sync.Mutex
	var done, sent atomic.Int64
	timeoutUS := s.Timeout.Microseconds()
	record := func(us int64, outcome *int64) {
		mu.Lock()
		*outcome++
		_ = res.Hist.RecordValue(max(us, 1))
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
		case lat > s.Timeout:
			record(timeoutUS, &res.Timeouts)
		case IsFailure(m):
			mu.Lock()
			res.Codes[ErrorCode(m)]++
			mu.Unlock()
			record(timeoutUS, &res.Errors)
		default:
			record(lat.Microseconds(), &res.OK)
			if s.Answered != nil {
				s.Answered(m, lat)
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
	r.Prog.Begin(s.Step, func() string {
		return fmt.Sprintf("%.0f req/s offered, %d/%d sent, %d answered", s.Rate, sent.Load(), n, done.Load())
	})
	if s.Started != nil {
		s.Started(start.Add(offs[0]))
	}

	cpu0 := ProcessCPU()
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		sleep := time.Sleep
		if s.Precise {
			pacerThread()
			sleep = pacerSleep
		}
		for i := range n {
			due := start.Add(offs[i])
			for d := time.Until(due); d > 0; d = time.Until(due) {
				if r.Ctx.Err() != nil {
					return
				}
				sleep(min(d, 50*time.Millisecond))
			}
			if r.Ctx.Err() != nil {
				return
			}
			if err := nc.PublishMsg(s.Build(prefix+strconv.Itoa(i), due)); err != nil && state[i].CompareAndSwap(0, 1) {
				record(timeoutUS, &res.Errors)
			}
			_ = res.Lag.RecordValue(max(time.Since(due).Microseconds(), 1))
			sent.Add(1)
		}
	}()
	<-sendDone
	res.Elapsed = time.Since(start)
	res.CPU = ProcessCPU() - cpu0

	last := int(sent.Load())
	if last > 0 {
		giveUp := start.Add(offs[last-1] + s.Timeout + 20*time.Millisecond)
		r.Poll(time.Until(giveUp), func() bool { return done.Load() >= int64(last) })
	}
	for i := range last {
		if state[i].CompareAndSwap(0, 1) {
			record(timeoutUS, &res.Timeouts)
		}
	}
	// An answer that won its slot just before the sweep may still be
	// recording; wait for it so res is complete.
	r.Poll(time.Second, func() bool { return done.Load() >= int64(last) })
	if err := r.Ctx.Err(); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	return res, nil
}

// ClosedSpec is one closed-loop run.
type ClosedSpec struct {
	Step    string
	Callers int
	Dur     time.Duration
	Timeout time.Duration
	Build   func() *nats.Msg
}

// ClosedLoop runs s.callers callers, spread over conns, each sending its
// next request as soon as the previous one is answered, for s.dur: the
// maximum throughput at that concurrency.
func (r *Run) ClosedLoop(conns []*nats.Conn, s ClosedSpec) (*Latency, error) {
	res := NewLatency()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var count atomic.Int64
	r.Prog.Begin(s.Step, func() string { return fmt.Sprintf("%d callers, %d answered", s.Callers, count.Load()) })
	cpu0 := ProcessCPU()
	start := time.Now()
	end := start.Add(s.Dur)
	for c := range s.Callers {
		nc := conns[c%len(conns)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := NewLatency()
			for time.Now().Before(end) && r.Ctx.Err() == nil {
				t0 := time.Now()
				reply, err := nc.RequestMsg(s.Build(), s.Timeout)
				lat := time.Since(t0)
				switch {
				case err == nats.ErrTimeout:
					mine.Timeouts++
					lat = s.Timeout
				case err != nil:
					mine.Errors++
					mine.Codes[err.Error()]++
					lat = s.Timeout
				case IsFailure(reply):
					mine.Errors++
					mine.Codes[ErrorCode(reply)]++
					lat = s.Timeout
				default:
					mine.OK++
					count.Add(1)
				}
				_ = mine.Hist.RecordValue(max(lat.Microseconds(), 1))
			}
			mu.Lock()
			res.Add(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.CPU = ProcessCPU() - cpu0
	return res, r.Ctx.Err()
}
