package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// Stage 4 of a task's path, pick: one of the candidates, by the
// capability's strategy (selection.Picker), passing over instances that
// are full, whose breaker refuses, that are too slow for the task's
// max_latency_ms, that refused its payload or that this chain visited too
// often. A slot of the instance picked is reserved; while every instance
// is full the task waits in the replica (queue.go).

// pick picks the next instance for t among its candidates rs and reserves
// one of its slots (counted in its in-flight tasks: send uses it, settle
// frees it). It prefers instances t has not tried, and passes over
// instances that are full (own in-flight at max_concurrent), whose breaker
// refuses, or that this chain visited too often. When none is left it says
// why.
func (en *Engine) pick(t *Task, rs *registry.Routes) (inst *registry.Instance, probe bool, why NoRoute) {
	if !en.anyFree(rs) {
		return nil, false, RouteFull // the common answer while tasks wait: found cheaply
	}
	name := t.pol.Strategy
	var full, open, looped, slow int
	t.passed = t.passed[:0]
	now := time.Now()
	for _, retryTried := range []bool{false, true} {
		t.retryTried, t.skipIDs = retryTried, t.skipIDs[:0]
		for {
			i := en.picker.Pick(name, t.capability, rs, t)
			if i < 0 {
				break
			}
			cand := rs.Instances[i]
			l := en.loads.Of(cand.ID)
			over, ms := t.TooSlow(l, now)
			switch {
			case t.VisitsOf(cand.ID) >= en.cfg.MaxVisits:
				looped++
			case l.Absent(cand):
				// no subscription at this revision of its record: skipped
			case len(t.badTypes) > 0 && slices.Contains(t.badTypes, cand.Entry().Type):
				// its type's input schema refused the payload (checkInput)
			case over:
				slow++
				if !retryTried {
					t.passed = append(t.passed, streams.Exclusion{Node: cand.ID,
						Reason: fmt.Sprintf("observed latency %.1fms over max_latency_ms %v", ms, *t.need.MaxLatencyMS)})
				}
			case !l.Reserve(int64(cand.Entry().MaxConcurrent)):
				full++
			default:
				admit, isProbe := l.Breaker.Allow(now, t.pol.Breaker)
				if admit {
					return cand, isProbe, 0
				}
				l.Inflight.Add(-1)
				open++
				if !retryTried {
					t.passed = append(t.passed, streams.Exclusion{Node: cand.ID, Reason: "breaker open"})
				}
			}
			t.skipIDs = append(t.skipIDs, cand.ID)
		}
	}
	switch {
	case full > 0:
		return nil, false, RouteFull
	case open > 0:
		return nil, false, RouteOpen
	case looped > 0:
		return nil, false, RouteLooped
	}
	return nil, false, RouteNoAgent // every one passed over (too slow, or refused the payload)
}

// Matching returns the instances of rs (a capability's candidates) that
// qualify for t, from the cached view, and notes the view on t (for
// NO_AGENT's excluded list and the event record).
func (en *Engine) Matching(t *Task, rs *registry.Routes) *registry.Routes {
	v := en.viewOf(t, rs)
	t.view = v
	return v.Routes
}

func (en *Engine) viewOf(t *Task, rs *registry.Routes) *selection.View {
	key := viewKey{routes: rs, version: en.catalog.Version(), need: t.needKey}
	if v, ok := en.views.Load(key); ok {
		return v.(*selection.View)
	}
	v := selection.BuildView(en.catalog, t.capability, t.need, rs)
	en.views.Store(key, v)
	return v
}

// anyFree reports whether some instance of rs has a free slot here.
func (en *Engine) anyFree(rs *registry.Routes) bool {
	for _, inst := range rs.Instances {
		if en.loads.Of(inst.ID).Inflight.Load() < int64(inst.Entry().MaxConcurrent) {
			return true
		}
	}
	return false
}

// TooSlow reports, for a task with max_latency_ms, whether an instance's
// observed latency is over it (unknown latency passes).
func (t *Task) TooSlow(l *selection.Load, now time.Time) (bool, float64) {
	if t.need.MaxLatencyMS == nil {
		return false, 0
	}
	ms := l.CurrentLatency(now) / float64(time.Millisecond)
	return ms > *t.need.MaxLatencyMS, ms
}

// declaredCost is what inst's type declares one call of capability
// costs, if it declares it.
func (en *Engine) declaredCost(inst *registry.Instance, capability string) (float64, bool) {
	decl, ok := en.catalog.Lookup(inst.Entry().Type)
	if !ok {
		return 0, false
	}
	if c, ok := decl.Capability(capability); ok && c.Cost != nil {
		return *c.Cost, true
	}
	return 0, false
}
