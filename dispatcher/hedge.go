package dispatcher

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-reach/agentreach/streams"
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

// Defaults of HedgeConfig.
const (
	// DefaultHedgePercentile is the learned latency a hedge waits for when
	// HedgeConfig.After is 0: the 97th percentile, not the first design's
	// 95th. At the 95th, by definition about 5 % of deliveries are slower
	// than the delay, so a 5 % budget binds most of the time and which
	// tails it leaves unhedged varies from run to run (measured: p99.9
	// flipping between 12 and 225 ms); at the 97th the budget is rarely
	// what stops a hedge.
	DefaultHedgePercentile = 0.97
	// DefaultHedgeBudget is the share of deliveries that may be hedges.
	DefaultHedgeBudget = 0.05
	// hedgeMinSamples is how many latencies a capability needs before a
	// learned delay is trusted.
	hedgeMinSamples = 20
	// hedgeWindow is the span over which the budget counts deliveries.
	hedgeWindow = 10 * time.Second
)

// HedgeConfig turns hedging on for one capability. The zero value hedges
// after the learned 97th percentile within a 5 % budget.
type HedgeConfig struct {
	// After is a fixed hedge delay; 0 means Percentile of the capability's
	// recent latencies (and no hedge until 20 have been seen).
	After time.Duration
	// Percentile, in (0, 1), of the learned latencies used when After is
	// 0; default 0.97.
	Percentile float64
	// Budget, in (0, 1], caps hedges at this share of the capability's
	// deliveries over the last 10 s; default 0.05.
	Budget float64
}

func (h *HedgeConfig) setDefaults() {
	setDefault(&h.Percentile, DefaultHedgePercentile)
	setDefault(&h.Budget, DefaultHedgeBudget)
}

func (h HedgeConfig) validate(capability string) error {
	switch {
	case h.After < 0:
		return fmt.Errorf("hedge for %s: After must not be negative, got %v", capability, h.After)
	case !(h.Percentile > 0 && h.Percentile < 1):
		return fmt.Errorf("hedge for %s: Percentile must be between 0 and 1, got %v", capability, h.Percentile)
	case !(h.Budget > 0 && h.Budget <= 1):
		return fmt.Errorf("hedge for %s: Budget must be in (0, 1], got %v", capability, h.Budget)
	}
	return nil
}

// capHedge is one capability's hedging state in this replica: its latency
// window and its budget.
type capHedge struct {
	cfg     atomic.Pointer[HedgeConfig] // the current policy's
	latency latencyWindow

	mu    sync.Mutex
	slots [2]hedgeCount // the current and the previous half of the window
	cur   int
	since time.Time // start of slots[cur]
}

type hedgeCount struct{ deliveries, hedges int }

// hedgeOf returns the hedging state of a capability under cfg (its
// current policy's): the latency window and budget outlive policy changes.
func (d *Dispatcher) hedgeOf(capability string, cfg *HedgeConfig) *capHedge {
	h := lookup(&d.hedges, capability, func() *capHedge { return &capHedge{} })
	if h.cfg.Load() != cfg {
		h.cfg.Store(cfg)
	}
	return h
}

// delay is how long the first delivery may take before a hedge; 0 while
// the delay is not known yet.
func (h *capHedge) delay() time.Duration {
	cfg := h.cfg.Load()
	if cfg.After > 0 {
		return cfg.After
	}
	return h.latency.percentile(cfg.Percentile, hedgeMinSamples)
}

// counts rotates the window to now and returns its current half.
func (h *capHedge) counts(now time.Time) *hedgeCount {
	half := hedgeWindow / 2
	switch {
	case now.Sub(h.since) >= 2*half:
		h.slots = [2]hedgeCount{}
		h.since = now
	case now.Sub(h.since) >= half:
		h.cur = 1 - h.cur
		h.slots[h.cur] = hedgeCount{}
		h.since = h.since.Add(half)
	}
	return &h.slots[h.cur]
}

// delivered counts a first delivery of the capability.
func (h *capHedge) delivered(now time.Time) {
	h.mu.Lock()
	h.counts(now).deliveries++
	h.mu.Unlock()
}

// allow takes one hedge from the budget, if hedges would stay within
// Budget of the window's deliveries.
func (h *capHedge) allow(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.counts(now)
	all := h.slots[0].deliveries + h.slots[1].deliveries
	hedges := h.slots[0].hedges + h.slots[1].hedges
	if float64(hedges+1) > h.cfg.Load().Budget*float64(all) {
		return false
	}
	c.hedges++
	return true
}

// armHedge starts the hedge timer of a task's first delivery.
func (d *Dispatcher) armHedge(t *task, first *delivery) {
	now := time.Now()
	t.hedge.delivered(now)
	if first.attempt != 1 {
		return // only a first delivery is hedged; a retry is a second try already
	}
	delay := t.hedge.delay()
	if delay <= 0 || now.Add(delay).After(t.deadline) {
		return
	}
	time.AfterFunc(delay, func() { d.sendHedge(t, first) })
}

// sendHedge sends t's hedge if its first delivery is still waiting, the
// budget allows, and another instance can take it.
func (d *Dispatcher) sendHedge(t *task, first *delivery) {
	t.mu.Lock()
	waiting := !t.ended && !t.hedged && slices.Contains(t.open, first) && t.stopped.Load() == nil
	t.mu.Unlock()
	if !waiting {
		return
	}
	if !t.hedge.allow(time.Now()) {
		d.stats.hedgesRefused.Add(1)
		return
	}
	// Pick with a shadow of t, so that the pick touches none of the state
	// the first delivery's settling may be changing.
	shadow := &task{capability: t.capability, affinity: t.affinity, visits: t.visits, pol: t.pol, need: t.need, needKey: t.needKey,
		prefer: t.prefer, badTypes: t.badTypes, triedIDs: []string{first.inst.ID}, log: t.log}
	inst, probe, _ := d.resolve(shadow)
	if inst == nil {
		return
	}
	if inst.ID == first.inst.ID { // only the first instance could take it: no hedge
		d.loadOf(inst.ID).inflight.Add(-1)
		d.freed(inst)
		return
	}
	t.mu.Lock()
	if t.ended || t.stopped.Load() != nil {
		t.mu.Unlock()
		d.loadOf(inst.ID).inflight.Add(-1)
		d.freed(inst)
		return
	}
	t.hedged = true
	t.attempts++
	t.mu.Unlock()
	// The first delivery took at least the delay: counted so, censored,
	// whatever it takes in the end. Were its eventual latency counted, the
	// stalls a hedge gets around would still fill the window's tail, and a
	// delay learned among them would keep hedges too late to help.
	t.hedge.latency.observe(time.Since(first.sent))
	d.stats.hedged.Add(1)
	t.log.Debug().Str("node", inst.ID).Str("first", first.inst.ID).Msg("task hedged")
	d.send(t, inst, probe, true)
}

// hedgedSent reports whether t's hedge has gone out.
func (t *task) hedgedSent() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hedged
}

// latencyWindow keeps the last latencySamples latencies of something and
// answers percentiles of them, recomputed when read once latencyEvery new
// samples have come in since the last computation.
type latencyWindow struct {
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

func (w *latencyWindow) observe(d time.Duration) {
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

// percentile returns the p-th percentile of the window, 0 until it has
// seen need samples.
func (w *latencyWindow) percentile(p float64, need int) time.Duration {
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

// hedgeable reports why a capability configured for hedging may not be:
// writes are never hedged.
func (c *Config) hedgeable(capability string) error {
	if err := streams.ValidateCapability(capability); err != nil {
		return fmt.Errorf("hedge for %w", err)
	}
	if c.isWrite(capability) {
		return fmt.Errorf("hedge for %s: a write is never hedged (a second delivery could execute it twice)", capability)
	}
	return nil
}
