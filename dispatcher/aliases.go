package dispatcher

import "github.com/agent-reach/agentreach/dispatcher/selection"

// Names of the selection package under the dispatcher's own, so that a
// Config is written as before (Config.Breaker, Config.Hedges,
// Config.Strategies) and what the inspection API returns keeps its type.

// BreakerConfig sets when an instance's breaker opens and how it recovers
// (selection.BreakerConfig).
type BreakerConfig = selection.BreakerConfig

// BreakerState is the state of one instance's circuit breaker.
type BreakerState = selection.BreakerState

// BreakerStatus describes one instance's breaker.
type BreakerStatus = selection.BreakerStatus

// Breaker states.
const (
	BreakerClosed   = selection.BreakerClosed
	BreakerOpen     = selection.BreakerOpen
	BreakerHalfOpen = selection.BreakerHalfOpen
)

// HedgeConfig turns hedging on for one capability (selection.HedgeConfig).
type HedgeConfig = selection.HedgeConfig

// Defaults of HedgeConfig.
const (
	DefaultHedgePercentile = selection.DefaultHedgePercentile
	DefaultHedgeBudget     = selection.DefaultHedgeBudget
)

// Strategy names, chosen per capability in Config.Strategies.
const (
	StrategyLeastLoad          = selection.StrategyLeastLoad
	StrategyRoundRobin         = selection.StrategyRoundRobin
	StrategyWeightedRoundRobin = selection.StrategyWeightedRoundRobin
	StrategyHash               = selection.StrategyHash
)

// StrategyNames lists the strategy names, sorted.
func StrategyNames() []string { return selection.StrategyNames() }

// Preferences of Reach-Prefer.
const (
	PreferLatency = selection.PreferLatency
	PreferCost    = selection.PreferCost
	PreferQuality = selection.PreferQuality
)
