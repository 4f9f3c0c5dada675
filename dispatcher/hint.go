package dispatcher

import (
	"slices"
	"sync"
	"time"

	"github.com/agent-reach/agentreach/registry"
)

// hintSamples is how many recent latencies per agent type the learned
// timeout hint is computed from; it is recomputed every hintEvery samples.
const (
	hintSamples = 256
	hintEvery   = 32
)

// typeLatency learns an agent type's timeout hint, about 2 × p95 of its
// recent task latencies.
type typeLatency struct {
	mu      sync.Mutex
	samples []time.Duration // ring
	next    int
	seen    int
	hint    time.Duration
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
	if l.seen++; l.seen%hintEvery == 0 || l.seen == 8 {
		sorted := slices.Clone(l.samples)
		slices.Sort(sorted)
		l.hint = 2 * sorted[len(sorted)*95/100]
	}
}

func (l *typeLatency) current() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
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
