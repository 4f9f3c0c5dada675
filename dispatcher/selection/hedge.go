package selection

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Hedged requests (docs/reference.md, Hedged requests; after Dean &
// Barroso, "The Tail at Scale"). What a hedge needs of selection is here:
// its delay, learned from the capability's latencies, and its budget. The
// dispatcher's deliver stage sends it.

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

// SetDefaults fills in the zero fields with their defaults.
func (h *HedgeConfig) SetDefaults() {
	if h.Percentile == 0 {
		h.Percentile = DefaultHedgePercentile
	}
	if h.Budget == 0 {
		h.Budget = DefaultHedgeBudget
	}
}

// Validate reports a setting out of its range.
func (h HedgeConfig) Validate(capability string) error {
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

// Hedge is one capability's hedging state in this replica: its latency
// window and its budget. Its methods are safe for concurrent use.
type Hedge struct {
	cfg atomic.Pointer[HedgeConfig] // the current policy's
	// Latency holds the capability's recent first-delivery latencies.
	Latency LatencyWindow

	mu    sync.Mutex
	slots [2]hedgeCount // the current and the previous half of the window
	cur   int
	since time.Time // start of slots[cur]
}

type hedgeCount struct{ deliveries, hedges int }

// Hedges holds the hedging state of each capability. The zero value is
// ready; its methods are safe for concurrent use.
type Hedges struct {
	m sync.Map // capability → *Hedge
}

// Of returns the hedging state of a capability under cfg (its current
// policy's): the latency window and budget outlive policy changes.
func (hs *Hedges) Of(capability string, cfg *HedgeConfig) *Hedge {
	h := lookup(&hs.m, capability, func() *Hedge { return &Hedge{} })
	if h.cfg.Load() != cfg {
		h.cfg.Store(cfg)
	}
	return h
}

// Delay is how long the first delivery may take before a hedge; 0 while
// the delay is not known yet.
func (h *Hedge) Delay() time.Duration {
	cfg := h.cfg.Load()
	if cfg.After > 0 {
		return cfg.After
	}
	return h.Latency.Percentile(cfg.Percentile, hedgeMinSamples)
}

// counts rotates the window to now and returns its current half.
func (h *Hedge) counts(now time.Time) *hedgeCount {
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

// Delivered counts a first delivery of the capability.
func (h *Hedge) Delivered(now time.Time) {
	h.mu.Lock()
	h.counts(now).deliveries++
	h.mu.Unlock()
}

// Allow takes one hedge from the budget, if hedges would stay within
// Budget of the window's deliveries.
func (h *Hedge) Allow(now time.Time) bool {
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
