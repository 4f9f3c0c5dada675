package dispatcher

import (
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/streams"
)

// Names of the selection and events packages under the dispatcher's own,
// so that a Config is written as before (Config.Breaker, Config.Hedges,
// Config.Strategies), and an Observer, the inspection API and the readers
// of REACH_EVENTS keep their types.

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

// Event is the record every task leaves in REACH_EVENTS (events.Event).
type Event = events.Event

// Counts is what records add up to by the counting model (events.Counts).
type Counts = events.Counts

// Class is how an outcome counts (events.Class).
type Class = events.Class

// The classes of an outcome.
const (
	ClassFinished = events.ClassFinished
	ClassRejected = events.ClassRejected
	ClassFailed   = events.ClassFailed
)

// ClassOf returns the class of an outcome with error code code.
func ClassOf(code string) Class { return events.ClassOf(code) }

// StatusOf is the Reach-Status of a task that ended with e.
func StatusOf(e *streams.Error) string { return events.StatusOf(e) }

// DecodeEvents returns the records of one REACH_EVENTS message.
func DecodeEvents(data []byte) ([]Event, error) { return events.DecodeEvents(data) }

// Record kinds and outcomes (Event.Kind, Event.Outcome), and the header
// that counts a message's records.
const (
	KindBroadcast      = events.KindBroadcast
	KindFanOut         = events.KindFanOut
	KindFeedback       = events.KindFeedback
	OutcomeReply       = events.OutcomeReply
	OutcomeResult      = events.OutcomeResult
	OutcomeDeadLetter  = events.OutcomeDeadLetter
	OutcomeReview      = events.OutcomeReview
	OutcomeReviewRerun = events.OutcomeReviewRerun
	OutcomeReviewDrop  = events.OutcomeReviewDrop
	ExcludedInEvents   = events.ExcludedInEvents
	HeaderEvents       = events.HeaderEvents
)
