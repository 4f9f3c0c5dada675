package selection

import (
	"time"

	"github.com/agent-reach/agentreach/registry"
)

// Preferences of Reach-Prefer.
const (
	PreferLatency = "latency"
	PreferCost    = "cost"
	PreferQuality = "quality"
)

// preferred reports, for a task with Reach-Prefer prefer, whether b ranks
// above a, and whether the preference decided (false: the strategy's own
// rule applies). Unknown values never decide.
func (p *Picker) preferred(prefer, capability string, a, b *registry.Instance) (bLess, decided bool) {
	var (
		x, y         float64 // lower is better
		knowX, knowY bool
	)
	now := time.Now()
	switch prefer {
	case PreferCost:
		if p.Cost == nil {
			return false, false
		}
		x, knowX = p.Cost(a, capability)
		y, knowY = p.Cost(b, capability)
	case PreferLatency:
		x, y = p.Loads.Of(a.ID).CurrentLatency(now), p.Loads.Of(b.ID).CurrentLatency(now)
		knowX, knowY = x > 0, y > 0
	case PreferQuality:
		qa, na := p.Loads.Of(a.ID).Quality()
		qb, nb := p.Loads.Of(b.ID).Quality()
		x, y, knowX, knowY = -qa, -qb, na > 0, nb > 0
	default:
		return false, false
	}
	if !knowX || !knowY || x == y {
		return false, false
	}
	return y < x, true
}
