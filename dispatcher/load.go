package dispatcher

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-reach/agentreach/registry"
)

// Latency tracking of the least-load strategy.
const (
	// latencyAlpha weighs a new latency sample in the moving average.
	latencyAlpha = 0.2
	// latencyDecay is the time constant with which an instance's average
	// fades while it gets no task, so an instance once found slow is probed
	// again rather than starved forever.
	latencyDecay = 10 * time.Second
	// slowerRatio and slowerMargin say when one instance counts as slower
	// than another: both must hold, so that noise among equally fast
	// instances never overrides their weights.
	slowerRatio  = 1.5
	slowerMargin = time.Millisecond
)

// instLoad is this replica's view of one instance: its tasks in flight from
// here and a moving average of how long its tasks take.
type instLoad struct {
	inflight atomic.Int64

	mu     sync.Mutex
	ewma   float64 // nanoseconds; 0 before the first sample
	lastAt time.Time
}

// observe adds one task's latency to the average.
func (l *instLoad) observe(d time.Duration, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ewma == 0 {
		l.ewma = float64(d)
	} else {
		l.ewma = latencyAlpha*float64(d) + (1-latencyAlpha)*l.latency(now)
	}
	l.lastAt = now
}

// latency is the average faded by the time since the last sample; l.mu is
// held or the value may be slightly stale, which is harmless.
func (l *instLoad) latency(now time.Time) float64 {
	if l.ewma == 0 {
		return 0
	}
	idle := now.Sub(l.lastAt)
	return l.ewma * math.Exp(-float64(idle)/float64(latencyDecay))
}

func (l *instLoad) currentLatency(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latency(now)
}

// loadOf returns this replica's record of an instance.
func (d *Dispatcher) loadOf(id string) *instLoad {
	if l, ok := d.loads.Load(id); ok {
		return l.(*instLoad)
	}
	l, _ := d.loads.LoadOrStore(id, &instLoad{})
	return l.(*instLoad)
}

// forget drops per-instance state when an instance leaves the table.
func (d *Dispatcher) forget(id string) {
	d.loads.Delete(id)
}

// busy is the fraction of an instance's slots in use, counting this
// replica's in-flight tasks and the instance's reported active count.
func (d *Dispatcher) busy(inst *registry.Instance, l *instLoad) float64 {
	e := inst.Entry()
	return (float64(l.inflight.Load()) + float64(e.Active)) / float64(e.MaxConcurrent)
}

// lighter reports whether instance b should get the next task rather than
// a. When one is clearly slower (by slowerRatio and slowerMargin) the cost
// is latency × (busy + 1/max_concurrent), as in peak-EWMA balancers, so a
// slow instance gets work only when the fast ones queue up. Otherwise the
// cost is busy / weight, so equally fast instances settle at in-flight
// counts, and throughput, in proportion to their weights.
func (d *Dispatcher) lighter(a, b *registry.Instance) bool {
	la, lb := d.loadOf(a.ID), d.loadOf(b.ID)
	now := time.Now()
	ta, tb := la.currentLatency(now), lb.currentLatency(now)
	if clearlySlower(ta, tb) || clearlySlower(tb, ta) {
		ca := ta * (d.busy(a, la) + 1/float64(a.Entry().MaxConcurrent))
		cb := tb * (d.busy(b, lb) + 1/float64(b.Entry().MaxConcurrent))
		return cb < ca
	}
	return d.busy(b, lb)/float64(b.Entry().Weight) < d.busy(a, la)/float64(a.Entry().Weight)
}

// clearlySlower reports whether latency x is clearly above y.
func clearlySlower(x, y float64) bool {
	return y > 0 && x > slowerRatio*y && x-y > float64(slowerMargin)
}
