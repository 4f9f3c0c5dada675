// Package scale holds the scenarios that measure many agents: registry
// (thousands of simulated agents heartbeating), match (requirement
// matching at 10,000 agents) and broadcast (a broadcast to 1,000
// instances against a raw scatter-gather).
package scale
