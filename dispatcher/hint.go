package dispatcher

import (
	"slices"
	"sync"
	"time"

	"github.com/agent-reach/agentreach/registry"
)

// hintSamples is how many recent latencies per agent type the learned
// timeout hint is computed from; it is recomputed, when read, once
// hintEvery samples have come in since it last was (or once the first
// hintFirst have).
const (
	hintSamples = 256
	hintEvery   = 32
	hintFirst   = 8
)

// typeLatency learns an agent type's timeout hint, about 2 × p95 of its
// recent task latencies. Every finished task adds a sample; the hint is
// only needed when a task is acknowledged, so the percentile is computed
// then rather than on every sample.
type typeLatency struct {
	mu      sync.Mutex
	samples []time.Duration // ring
	next    int
	seen    int // samples ever observed
	at      int // seen when hint was computed
	hint    time.Duration
	sorted  []time.Duration // scratch for the percentile
}

func (l *typeLatency) observe(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) < hintSamples {
		l.samples = append(l.samples, d)
	} else {
		l.samples[l.next] = d
		l.next = (l.next + 1) % hintSamples
	}
	l.seen++
}

func (l *typeLatency) current() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen >= hintFirst && (l.at == 0 || l.seen-l.at >= hintEvery) {
		l.sorted = append(l.sorted[:0], l.samples...)
		slices.Sort(l.sorted)
		l.hint = 2 * l.sorted[len(l.sorted)*95/100]
		l.at = l.seen
	}
	return l.hint
}

func (d *Dispatcher) typeLatency(agentType string) *typeLatency {
	return lookup(&d.hints, agentType, func() *typeLatency { return &typeLatency{} })
}

// timeoutHint is the instance's declared hint, or the one learned for its
// type.
func (d *Dispatcher) timeoutHint(e *registry.Entry) time.Duration {
	if h := e.TimeoutHint(); h > 0 {
		return h
	}
	return d.typeLatency(e.Type).current()
}
