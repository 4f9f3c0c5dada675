package selection

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/agent-reach/agentreach/registry"
)

// Strategy names, chosen per capability in Config.Strategies.
const (
	// StrategyLeastLoad: power-of-two choices. Two instances are sampled in
	// proportion to their weights and the lighter one wins: by latency ×
	// load when one is clearly slower, else by (own in-flight + reported
	// active) / max_concurrent / weight (see Loads.Lighter). A tie keeps
	// the first sample, so idle instances share by weight too.
	StrategyLeastLoad = "least_load"
	// StrategyRoundRobin: instances in turn, ignoring weights and load.
	StrategyRoundRobin = "round_robin"
	// StrategyWeightedRoundRobin: instances in turn, each in proportion to
	// its weight, interleaved.
	StrategyWeightedRoundRobin = "weighted_round_robin"
	// StrategyHash: weighted rendezvous hashing on Reach-Affinity-Key, so a
	// key keeps its instance while that instance lives; tasks without the
	// header fall back to least load.
	StrategyHash = "hash"
)

// Task is what a strategy reads of the task it places. Its methods are
// called on the picking goroutine only.
type Task interface {
	// Tried reports whether the strategy must not pick instance id now.
	Tried(id string) bool
	// AffinityKey is the task's Reach-Affinity-Key, "" without one.
	AffinityKey() string
	// Preference is the task's Reach-Prefer, "" without one.
	Preference() string
}

// Picker places tasks on instances by their capability's strategy. Set
// Loads (and Cost, for Reach-Prefer: cost) before use; its methods are
// safe for concurrent use.
type Picker struct {
	Loads *Loads
	// Cost returns what inst's type declares one call of capability costs,
	// and whether it declares it; nil: no instance declares a cost.
	Cost func(inst *registry.Instance, capability string) (float64, bool)
	rr   counters
}

// Pick returns the index in rs of the instance the named strategy picks
// for t, never one t has tried; -1 when none is left. The name must be
// one of StrategyNames (Known).
func (p *Picker) Pick(strategy, capability string, rs *registry.Routes, t Task) int {
	return strategies[strategy](p, capability, rs, t)
}

// Known reports whether name is a strategy's.
func Known(name string) bool {
	_, ok := strategies[name]
	return ok
}

// strategy picks the index of an instance in rs for t, never one t has
// tried; -1 when none is left.
type strategy func(p *Picker, capability string, rs *registry.Routes, t Task) int

var strategies = map[string]strategy{
	StrategyLeastLoad:          leastLoad,
	StrategyRoundRobin:         roundRobin,
	StrategyWeightedRoundRobin: weightedRoundRobin,
	StrategyHash:               consistentHash,
}

// StrategyNames lists the strategy names, sorted.
func StrategyNames() []string {
	names := make([]string, 0, len(strategies))
	for n := range strategies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func leastLoad(p *Picker, capability string, rs *registry.Routes, t Task) int {
	a := sampleWeighted(rs, t, -1)
	if a < 0 {
		return -1
	}
	b := sampleWeighted(rs, t, a)
	if b < 0 {
		return a
	}
	if bFirst, decided := p.preferred(t.Preference(), capability, rs.Instances[a], rs.Instances[b]); decided { // Reach-Prefer
		if bFirst {
			return b
		}
		return a
	}
	if p.Loads.Lighter(rs.Instances[a], rs.Instances[b]) {
		return b
	}
	return a
}

// sampleWeighted draws an untried instance other than except in proportion
// to weight (sampling without replacement when except >= 0); -1 if none.
func sampleWeighted(rs *registry.Routes, t Task, except int) int {
	total := rs.TotalWeight()
	var skipFrom, skipLen int64
	if except >= 0 {
		start, end := rs.Span(except)
		skipFrom, skipLen = start, end-start
	}
	if total-skipLen <= 0 {
		return -1
	}
	for range 4 {
		w := rand.Int64N(total - skipLen)
		if skipLen > 0 && w >= skipFrom {
			w += skipLen
		}
		i := rs.AtWeight(w)
		if !t.Tried(rs.Instances[i].ID) {
			return i
		}
	}
	n := rs.Len()
	for k, start := 0, rand.IntN(n); k < n; k++ {
		if i := (start + k) % n; i != except && !t.Tried(rs.Instances[i].ID) {
			return i
		}
	}
	return -1
}

// nextUntried returns the first untried index at or after start, cyclically.
func nextUntried(rs *registry.Routes, t Task, start int) int {
	n := rs.Len()
	for k := range n {
		i := (start + k) % n
		if !t.Tried(rs.Instances[i].ID) {
			return i
		}
	}
	return -1
}

// counters holds one round-robin counter per capability.
type counters struct{ m sync.Map }

func (c *counters) next(capability string) uint64 {
	return lookup(&c.m, capability, func() *atomic.Uint64 { return new(atomic.Uint64) }).Add(1) - 1
}

func roundRobin(p *Picker, capability string, rs *registry.Routes, t Task) int {
	return nextUntried(rs, t, int(p.rr.next(capability)%uint64(rs.Len())))
}

func weightedRoundRobin(p *Picker, capability string, rs *registry.Routes, t Task) int {
	total := rs.TotalWeight()
	if total <= 0 {
		return -1
	}
	// Step through the summed weights with a stride coprime to the total:
	// each cycle of `total` picks visits every weight unit once, so every
	// instance gets exactly its share, interleaved rather than in blocks.
	stride := coprimeStride(total)
	k := int64(p.rr.next(capability) % uint64(total))
	w := int64((uint64(k) * uint64(stride)) % uint64(total))
	return nextUntried(rs, t, rs.AtWeight(w))
}

func coprimeStride(total int64) int64 {
	s := max(int64(float64(total)*0.6180339887), 1)
	for gcd(s, total) != 1 {
		s++
	}
	return s
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func consistentHash(p *Picker, capability string, rs *registry.Routes, t Task) int {
	affinity := t.AffinityKey()
	if affinity == "" {
		return leastLoad(p, capability, rs, t)
	}
	best, bestScore := -1, math.Inf(-1)
	for i, inst := range rs.Instances {
		if t.Tried(inst.ID) {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(affinity))
		h.Write([]byte{0})
		h.Write([]byte(inst.ID))
		u := (float64(h.Sum64()>>11) + 0.5) / (1 << 53) // in (0,1)
		score := float64(inst.Entry().Weight) / -math.Log(u)
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}
