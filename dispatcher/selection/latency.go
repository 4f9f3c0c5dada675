package selection

import (
	"slices"
	"sync"
	"time"

	"github.com/agent-reach/agentreach/registry"
)

// LatencyWindow keeps the last latencySamples latencies of something and
// answers percentiles of them, recomputed when read once latencyEvery new
// samples have come in since the last computation. Its methods are safe
// for concurrent use.
type LatencyWindow struct {
	mu      sync.Mutex
	samples []time.Duration // ring
	next    int
	seen    int // samples ever observed
	at      int // seen when value was computed
	p       float64
	value   time.Duration
	sorted  []time.Duration // scratch for the percentile
}

const (
	latencySamples = 256
	latencyEvery   = 32
)

// Observe adds one latency.
func (w *LatencyWindow) Observe(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) < latencySamples {
		w.samples = append(w.samples, d)
	} else {
		w.samples[w.next] = d
		w.next = (w.next + 1) % latencySamples
	}
	w.seen++
}

// Percentile returns the p-th percentile of the window, 0 until it has
// seen need samples.
func (w *LatencyWindow) Percentile(p float64, need int) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen < need {
		return 0
	}
	if w.at == 0 || w.p != p || w.seen-w.at >= latencyEvery {
		w.sorted = append(w.sorted[:0], w.samples...)
		slices.Sort(w.sorted)
		i := min(int(p*float64(len(w.sorted))), len(w.sorted)-1) // the sample above a share p of them
		w.value, w.at, w.p = w.sorted[i], w.seen, p
	}
	return w.value
}

// hintFirst is how many latencies an agent type needs before its timeout
// hint is learned.
const hintFirst = 8

// Hints learns the timeout hint of each agent type: about 2 × p95 of its
// recent task latencies (a LatencyWindow). Every finished task adds a
// sample; the hint is only needed when a task is acknowledged, so the
// percentile is computed then rather than on every sample. The zero value
// is ready; its methods are safe for concurrent use.
type Hints struct {
	m sync.Map // agent type → *LatencyWindow
}

// Type returns the latencies of an agent type.
func (h *Hints) Type(agentType string) *LatencyWindow {
	return lookup(&h.m, agentType, func() *LatencyWindow { return &LatencyWindow{} })
}

// TimeoutHint is the instance's declared hint, or the one learned for its
// type (0 until known).
func (h *Hints) TimeoutHint(e *registry.Entry) time.Duration {
	if d := e.TimeoutHint(); d > 0 {
		return d
	}
	return 2 * h.Type(e.Type).Percentile(0.95, hintFirst)
}
