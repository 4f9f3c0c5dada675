package engine

import (
	"slices"
	"time"
)

// Hedged requests (docs/reference.md, Hedged requests; after Dean &
// Barroso, "The Tail at Scale").
// For a capability with hedging on, a direct-tier task whose first delivery
// has not answered within the hedge delay gets a second delivery to another
// instance, with the same request id and idempotency key. The first answer
// that ends the task wins; the other delivery is cancelled. Hedges are
// capped by a budget: a share of the capability's deliveries over a sliding
// window. Only capabilities whose repeated execution is harmless may be
// hedged (declared idempotent or read-only); writes never are.

// armHedge starts the hedge timer of a task's first delivery.
func (en *Engine) armHedge(t *Task, first *delivery) {
	now := time.Now()
	t.hedge.Delivered(now)
	if first.attempt != 1 {
		return // only a first delivery is hedged; a retry is a second try already
	}
	delay := t.hedge.Delay()
	if delay <= 0 || now.Add(delay).After(t.deadline) {
		return
	}
	time.AfterFunc(delay, func() { en.sendHedge(t, first) })
}

// sendHedge sends t's hedge if its first delivery is still waiting, the
// budget allows, and another instance can take it.
func (en *Engine) sendHedge(t *Task, first *delivery) {
	t.mu.Lock()
	waiting := !t.ended && !t.hedged && slices.Contains(t.open, first) && t.stopped.Load() == nil &&
		t.pinned() == nil // a stream that has begun is pinned
	t.mu.Unlock()
	if !waiting {
		return
	}
	if !t.hedge.Allow(time.Now()) {
		en.stats.hedgesRefused.Add(1)
		return
	}
	// Pick with a shadow of t, so that the pick touches none of the state
	// the first delivery's settling may be changing.
	shadow := &Task{capability: t.capability, affinity: t.affinity, visits: t.visits, pol: t.pol, need: t.need, needKey: t.needKey,
		prefer: t.prefer, badTypes: t.badTypes, triedIDs: []string{first.inst.ID}, log: t.log}
	inst, probe, _ := en.route(shadow)
	if inst == nil {
		return
	}
	if inst.ID == first.inst.ID { // only the first instance could take it: no hedge
		en.loads.Of(inst.ID).Inflight.Add(-1)
		en.Freed(inst)
		return
	}
	t.mu.Lock()
	if t.ended || t.stopped.Load() != nil {
		t.mu.Unlock()
		en.loads.Of(inst.ID).Inflight.Add(-1)
		en.Freed(inst)
		return
	}
	t.hedged = true
	t.attempts++
	t.mu.Unlock()
	// The first delivery took at least the delay: counted so, censored,
	// whatever it takes in the end. Were its eventual latency counted, the
	// stalls a hedge gets around would still fill the window's tail, and a
	// delay learned among them would keep hedges too late to help.
	t.hedge.Latency.Observe(time.Since(first.sent))
	en.stats.hedged.Add(1)
	t.log.Debug().Str("node", inst.ID).Str("first", first.inst.ID).Msg("task hedged")
	en.send(t, inst, probe, true)
}

// hedgedSent reports whether t's hedge has gone out.
func (t *Task) hedgedSent() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hedged
}
