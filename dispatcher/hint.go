package dispatcher

import (
	"time"

	"github.com/agent-reach/agentreach/registry"
)

// hintFirst is how many latencies an agent type needs before its timeout
// hint is learned.
const hintFirst = 8

// The learned timeout hint of an agent type is about 2 × p95 of its recent
// task latencies (a latencyWindow). Every finished task adds a sample; the
// hint is only needed when a task is acknowledged, so the percentile is
// computed then rather than on every sample.

// typeHint returns the learned hint of a type's latencies, 0 until known.
func typeHint(w *latencyWindow) time.Duration { return 2 * w.percentile(0.95, hintFirst) }

func (d *Dispatcher) typeLatency(agentType string) *latencyWindow {
	return lookup(&d.hints, agentType, func() *latencyWindow { return &latencyWindow{} })
}

// timeoutHint is the instance's declared hint, or the one learned for its
// type.
func (d *Dispatcher) timeoutHint(e *registry.Entry) time.Duration {
	if h := e.TimeoutHint(); h > 0 {
		return h
	}
	return typeHint(d.typeLatency(e.Type))
}
