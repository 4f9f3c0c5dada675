package dispatcher

import (
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/registry/policy"
)

// policy returns capability's settings under the live policy's current
// snapshot (config.Capabilities resolves and caches them).
func (d *Dispatcher) policy(capability string) *config.Capability {
	var set *policy.Set
	if d.policies != nil {
		set = d.policies.Current()
	}
	return d.caps.For(capability, set)
}

// Quorum returns the completion policy REACH_POLICY gives broadcasts of
// capability ("quorum": a fraction below 1 or a count), if it gives one.
func (d *Dispatcher) Quorum(capability string) (float64, bool) {
	if q := d.policy(capability).Quorum; q != nil {
		return *q, true
	}
	return 0, false
}
