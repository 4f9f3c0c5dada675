package scale

import (
	"fmt"

	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/registry/declare"
)

// The match scenario's population: 100 declared types, their instances,
// their declarations and the policy shards that route them.

// matchType is the agent type of declaration i.
func matchType(i int) string { return fmt.Sprintf("match-t%02d", i) }

// matchID is instance j of type i.
func matchID(i, j int) string { return fmt.Sprintf("m%02d-%03d", i, j) }

// matchDeclaration is type i's declaration: pool p<i%5>, shard
// s<(i/10)%10>, history_days 30 for i%10 == 0 and 7 for the others, read
// granted and delete refused.
func matchDeclaration(i int) *declare.Declaration {
	days := 7.0
	if i%matchEvery == 0 {
		days = 30
	}
	return &declare.Declaration{
		Type: matchType(i), Version: "1.0.0",
		Capabilities: []declare.DeclaredCapability{{Name: matchCapability, Mode: declare.ModeRead, Idempotent: true}},
		Labels: map[string][]string{"pool": {fmt.Sprintf("p%d", i%5)}, "shard": {fmt.Sprintf("s%d", (i/10)%10)},
			"region": {[]string{"eu-west", "us-east"}[i%2]}},
		Limits:      map[string]float64{"history_days": days, "max_rows": float64(1000 * (i + 1))},
		Permissions: []string{"read"}, Refuses: []string{"delete"},
	}
}

// matchShardPolicy is a capability policy whose default requirement
// leaves only the type with shard s<shard> among those matchRequire
// leaves: type 10*shard.
func matchShardPolicy(shard int) []byte {
	return fmt.Appendf(nil, `{"require":{"labels":{"pool":"p0","shard":"s%d"},"limits":{"history_days":30},"permissions":["read"]}}`, shard)
}

// usedOf returns how many of ids answered at least one delivery.
func usedOf(fl *harness.Fleet, ids []string) int {
	n := 0
	for _, id := range ids {
		if c := fl.ByID[id]; c != nil && c.Load() > 0 {
			n++
		}
	}
	return n
}
