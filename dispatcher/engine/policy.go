package engine

import (
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/registry/policy"
)

// Policy returns capability's settings under the live policy's current
// snapshot (config.Capabilities resolves and caches them).
func (en *Engine) Policy(capability string) *config.Capability {
	var set *policy.Set
	if en.policies != nil {
		set = en.policies.Current()
	}
	return en.caps.For(capability, set)
}
