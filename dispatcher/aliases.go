package dispatcher

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/streams"
)

// Names of the selection, events and durable packages under the
// dispatcher's own, so that a Config is written as before (Config.Breaker,
// Config.Hedges, Config.Strategies), and an Observer, the inspection API,
// the readers of REACH_EVENTS and the tools of the durable tier keep their
// types.

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

// Defaults of the durable tier.
const (
	DefaultDurableConsumer         = durable.DefaultConsumer
	DefaultDurableDeadline         = durable.DefaultDeadline
	DefaultDurablePending          = durable.DefaultPending
	DefaultDurableAckWait          = durable.DefaultAckWait
	DefaultDeadLetterRetryInterval = durable.DefaultDeadLetterRetryInterval
	DefaultDeadLetterReplayRate    = durable.DefaultDeadLetterReplayRate
)

// Reasons recorded with a dead letter or review entry.
const (
	ReasonFailed   = durable.ReasonFailed
	ReasonPoison   = durable.ReasonPoison
	ReasonDeadline = durable.ReasonDeadline
	ReasonInDoubt  = durable.ReasonInDoubt
)

// Parked is a task held in REACH_DLQ or REACH_REVIEW (durable.Parked).
type Parked = durable.Parked

// ReplayOption configures a Replay (durable.ReplayOption).
type ReplayOption = durable.ReplayOption

// ListParked returns every task held in stream (durable.ListParked).
func ListParked(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, stream string) ([]Parked, error) {
	return durable.ListParked(ctx, js, subjects, stream)
}

// GetParked returns one task held in stream by sequence (durable.GetParked).
func GetParked(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, stream string, seq uint64) (Parked, error) {
	return durable.GetParked(ctx, js, subjects, stream, seq)
}

// DeleteParked removes one parked entry (durable.DeleteParked).
func DeleteParked(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) error {
	return durable.DeleteParked(ctx, js, stream, seq)
}

// ReplaySign makes Replay sign the resubmission (durable.ReplaySign).
func ReplaySign(sign func(*nats.Msg) error) ReplayOption { return durable.ReplaySign(sign) }

// Replay resubmits a parked task to the durable tier (durable.Replay).
func Replay(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, p Parked, deadline time.Time, opts ...ReplayOption) error {
	return durable.Replay(ctx, js, subjects, p, deadline, opts...)
}

// RecordResolution publishes the record of a person's decision on a review
// entry (durable.RecordResolution).
func RecordResolution(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, p Parked, resolution, by string) error {
	return durable.RecordResolution(ctx, js, subjects, p, resolution, by)
}

// RequestIDOfSubmission returns the request id a durable submission
// without Reach-Request-Id is known by (durable.RequestIDOfSubmission).
func RequestIDOfSubmission(h nats.Header) string { return durable.RequestIDOfSubmission(h) }

// KeepInProgress keeps msg's ack wait from expiring until stop is called
// (durable.KeepInProgress).
func KeepInProgress(msg jetstream.Msg, ackWait time.Duration) (stop func()) {
	return durable.KeepInProgress(msg, ackWait)
}
