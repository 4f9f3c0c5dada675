package config

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/relay"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/streams"
)

// Defaults of Config.
const (
	DefaultQueueGroup   = "reach-dispatchers"
	DefaultAckTimeout   = 3 * time.Second
	DefaultDeadline     = 60 * time.Second
	DefaultMaxInFlight  = 5000
	DefaultRetries      = 2
	DefaultWriteRetries = 1
	DefaultBackoffBase  = 100 * time.Millisecond
	DefaultBackoffMax   = 2 * time.Second
	DefaultQueueWait    = 2 * time.Second
	DefaultMaxHops      = 8
	DefaultMaxVisits    = 3
	DefaultPenalty      = 0.1
	DefaultPenaltyDecay = 5 * time.Minute
	DefaultStrategy     = selection.StrategyLeastLoad
	// DefaultMinCallTimeout and DefaultMaxCallTimeout clamp the per-call
	// timeout.
	DefaultMinCallTimeout = 5 * time.Second
	DefaultMaxCallTimeout = 120 * time.Second
	// DefaultStreamBuffer is how many chunks a stream holds for a slow
	// caller before it ends OVERLOADED (Config.StreamBuffer).
	DefaultStreamBuffer = relay.DefaultLimit
)

// NoRetries disables retries where a retry count is asked for.
const NoRetries = -1

// Config configures a dispatcher replica (dispatcher.New). The zero value
// means all defaults; SetDefaults fills them in and Validate checks the
// result, as New does.
type Config struct {
	// Subjects names the subjects; zero means prefix "reach".
	Subjects streams.Subjects
	// QueueGroup is shared by all replicas; default "reach-dispatchers".
	QueueGroup string
	// Name identifies this replica in logs and stats; default a random id.
	Name string
	// AckTimeout is how long an instance has to answer ACKED before it is
	// treated as unreachable and the task goes elsewhere; default 3 s.
	AckTimeout time.Duration
	// Deadline is the overall deadline of a task whose caller sets no
	// Reach-Deadline; default 60 s.
	Deadline time.Duration
	// MinCallTimeout and MaxCallTimeout clamp the per-call timeout,
	// max(caller's Reach-Timeout, agent's hint) + 2 s; defaults 5 s and 120 s.
	MinCallTimeout, MaxCallTimeout time.Duration
	// MaxInFlight caps the tasks this replica handles at once; beyond it
	// callers get OVERLOADED at once. Default 5000.
	MaxInFlight int
	// FairShareAt is how many tasks the replica holds before it shares
	// them out: above it, a caller (Reach-Source; none is one "anonymous"
	// caller) holding FairShareAt / (callers holding tasks) or more gets
	// OVERLOADED, so a caller alone fills the replica up to FairShareAt and
	// the slots above it stay free for the others. Default 80% of
	// MaxInFlight (at least 1); MaxInFlight turns fair share off.
	FairShareAt int
	// Retries is how many times a task is delivered again after TIMEOUT,
	// TARGET_BUSY, no ACK or a transport failure (never after BIZ_REJECT,
	// BAD_REQUEST or other errors); default 2, NoRetries for none.
	Retries int
	// WriteRetries replaces Retries for capabilities in Writes; default 1.
	WriteRetries int
	// CapabilityRetries overrides the retries of single capabilities.
	CapabilityRetries map[string]int
	// Writes lists capabilities that change state. For them the dispatcher
	// sets Reach-Idempotency-Key to the request id when the caller set none,
	// so agents execute each task at most once across retries.
	Writes []string
	// BackoffBase and BackoffMax bound the exponential backoff (with full
	// jitter, and never more than a quarter of the remaining deadline)
	// before retrying after TIMEOUT or TARGET_BUSY; defaults 100 ms and 2 s.
	// Unreachable instances (no ACK, no subscription) are left at once.
	BackoffBase, BackoffMax time.Duration
	// QueueWait is how long a task waits, in arrival order, for a free slot
	// when every instance of its capability has all its slots in use (as far
	// as this replica knows); a slot freed here goes to the oldest waiting
	// task at once. After it the task fails with TARGET_BUSY. Default 2 s,
	// never past the task's deadline; negative: no waiting, TARGET_BUSY is
	// retried after a backoff like an agent's.
	QueueWait time.Duration
	// Handlers is how many goroutines (each on a subscription of its own)
	// take tasks, and how many take agents' replies (each delivery's replies
	// on one of them, in order); default GOMAXPROCS. One of each keeps a
	// replica's work on one core, and one slow step delays every task
	// behind it.
	Handlers int
	// RelayResults sends every result through this replica. By default a
	// direct-tier delivery offers the agent the caller's reply subject
	// (Reach-Reply-To), and an agent allowed to publish there answers the
	// caller itself, which saves the caller a message hop; the replica still
	// learns the outcome. Set it when callers' reply subjects must stay
	// private to the dispatchers.
	RelayResults bool
	// MaxHops is the hop limit beyond which a task is LOOP_DETECTED; default 8.
	MaxHops int
	// MaxVisits is how often one chain (Reach-Visits) may reach the same
	// instance; beyond it the instance is skipped, and the task is
	// LOOP_DETECTED if no other remains. Default 3.
	MaxVisits int
	// Breaker configures the per-instance circuit breakers.
	Breaker selection.BreakerConfig
	// Penalty is the load added to an instance after a failure or timeout,
	// fading linearly to nothing over PenaltyDecay; defaults 0.1 and 5 min.
	Penalty      float64
	PenaltyDecay time.Duration
	// NoDurable keeps this replica off the durable tier (REACH_TASKS).
	NoDurable bool
	// NoEvents stops this replica from writing a feedback record per task
	// to REACH_EVENTS.
	NoEvents bool
	// DurableConsumer names the consumer all replicas share; default
	// "reach-dispatchers".
	DurableConsumer string
	// DurableDeadline is the overall deadline of a durable task whose
	// submitter sets no Reach-Deadline, from its submission (the server's
	// timestamp); past it the task goes to REACH_REVIEW. Default 1 h.
	DurableDeadline time.Duration
	// DurablePending bounds the durable tasks this consumer has delivered
	// and not yet acknowledged (MaxAckPending); default 1000.
	DurablePending int
	// DurableAckWait is the consumer's ack wait; in-progress acks extend it
	// while a task runs, and a crashed replica's tasks are redelivered after
	// it. Default 30 s.
	DurableAckWait time.Duration
	// DeadLetterRetryInterval is how often dead letters are replayed (when
	// a healthy capable instance exists); default 1 h, negative disables.
	DeadLetterRetryInterval time.Duration
	// DeadLetterReplayRate throttles replays, in tasks per second, so a
	// recovering agent is not flooded; default 20.
	DeadLetterReplayRate float64
	// DefaultStrategy picks instances for capabilities not in Strategies;
	// default "least_load".
	DefaultStrategy string
	// Hedges turns hedged requests on for capabilities (docs/reference.md, Hedged requests): a
	// second delivery to another instance when the first has not answered
	// within the hedge delay, first answer wins. Only for capabilities whose
	// repeated execution is harmless (idempotent or read-only); a write
	// (Writes) is refused.
	Hedges map[string]selection.HedgeConfig
	// Strategies maps a capability to its strategy name: "least_load",
	// "round_robin", "weighted_round_robin" or "hash" (consistent hashing on
	// Reach-Affinity-Key).
	Strategies map[string]string
	// StreamBuffer is how many chunks of one streamed task wait for a slow
	// caller before the stream ends OVERLOADED; default
	// DefaultStreamBuffer (256).
	StreamBuffer int
}

// SetDefaults fills in the default of every field left zero.
func (c *Config) SetDefaults() {
	setDefault(&c.QueueGroup, DefaultQueueGroup)
	setDefault(&c.AckTimeout, DefaultAckTimeout)
	setDefault(&c.StreamBuffer, DefaultStreamBuffer)
	setDefault(&c.Deadline, DefaultDeadline)
	setDefault(&c.MaxInFlight, DefaultMaxInFlight)
	setDefault(&c.FairShareAt, max(1, c.MaxInFlight*4/5))
	setDefault(&c.MinCallTimeout, DefaultMinCallTimeout)
	setDefault(&c.MaxCallTimeout, DefaultMaxCallTimeout)
	setDefault(&c.Retries, DefaultRetries)
	setDefault(&c.WriteRetries, DefaultWriteRetries)
	setDefault(&c.BackoffBase, DefaultBackoffBase)
	setDefault(&c.BackoffMax, DefaultBackoffMax)
	setDefault(&c.QueueWait, DefaultQueueWait)
	setDefault(&c.Handlers, runtime.GOMAXPROCS(0))
	setDefault(&c.MaxHops, DefaultMaxHops)
	setDefault(&c.MaxVisits, DefaultMaxVisits)
	setDefault(&c.Penalty, DefaultPenalty)
	setDefault(&c.PenaltyDecay, DefaultPenaltyDecay)
	setDefault(&c.DefaultStrategy, DefaultStrategy)
	setDefault(&c.DurableConsumer, durable.DefaultConsumer)
	setDefault(&c.DurableDeadline, durable.DefaultDeadline)
	setDefault(&c.DurablePending, durable.DefaultPending)
	setDefault(&c.DurableAckWait, durable.DefaultAckWait)
	setDefault(&c.DeadLetterRetryInterval, durable.DefaultDeadLetterRetryInterval)
	setDefault(&c.DeadLetterReplayRate, durable.DefaultDeadLetterReplayRate)
	c.Breaker.SetDefaults()
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Validate reports, wrapping ErrInvalid, what of c (defaults filled in)
// a replica cannot run.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case c.AckTimeout < 0 || c.Deadline < 0 || c.BackoffBase < 0 || c.BackoffMax < c.BackoffBase:
		return bad("timeouts must not be negative and BackoffMax must be at least BackoffBase")
	case c.MinCallTimeout < 0 || c.MaxCallTimeout < c.MinCallTimeout:
		return bad("MaxCallTimeout (%v) must be at least MinCallTimeout (%v)", c.MaxCallTimeout, c.MinCallTimeout)
	case c.MaxInFlight < 1:
		return bad("MaxInFlight must be at least 1, got %d", c.MaxInFlight)
	case c.FairShareAt < 1 || c.FairShareAt > c.MaxInFlight:
		return bad("FairShareAt must be from 1 to MaxInFlight (%d), got %d", c.MaxInFlight, c.FairShareAt)
	case c.Handlers < 1:
		return bad("Handlers must be at least 1, got %d", c.Handlers)
	case c.Retries < NoRetries || c.WriteRetries < NoRetries:
		return bad("retries must be %d (none) or more", NoRetries)
	case c.StreamBuffer < 1:
		return bad("StreamBuffer must be at least 1, got %d", c.StreamBuffer)
	case c.MaxHops < 1 || c.MaxVisits < 1:
		return bad("MaxHops and MaxVisits must be at least 1")
	case c.DurablePending < 1 || c.DurableAckWait < time.Second || c.DurableDeadline < 0 || c.DeadLetterReplayRate <= 0:
		return bad("DurablePending must be at least 1, DurableAckWait at least 1s, DeadLetterReplayRate positive")
	case c.Penalty < 0 || c.PenaltyDecay < 0:
		return bad("Penalty and PenaltyDecay must not be negative")
	}
	if err := c.Breaker.Validate(); err != nil {
		return bad("%v", err)
	}
	if !selection.Known(c.DefaultStrategy) {
		return bad("unknown default strategy %q (want one of %v)", c.DefaultStrategy, selection.StrategyNames())
	}
	for capability, name := range c.Strategies {
		if err := streams.ValidateCapability(capability); err != nil {
			return bad("strategy for %v", err)
		}
		if !selection.Known(name) {
			return bad("unknown strategy %q for %s (want one of %v)", name, capability, selection.StrategyNames())
		}
	}
	for capability, n := range c.CapabilityRetries {
		if err := streams.ValidateCapability(capability); err != nil {
			return bad("retries for %v", err)
		}
		if n < NoRetries {
			return bad("retries for %s must be %d (none) or more", capability, NoRetries)
		}
	}
	for _, capability := range c.Writes {
		if err := streams.ValidateCapability(capability); err != nil {
			return bad("writes: %v", err)
		}
	}
	for capability, h := range c.Hedges {
		if err := c.hedgeable(capability); err != nil {
			return bad("%v", err)
		}
		h.SetDefaults()
		if err := h.Validate(capability); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// IsWrite reports whether capability is configured as a write.
func (c *Config) IsWrite(capability string) bool { return slices.Contains(c.Writes, capability) }

// RetriesFor returns how many retries a task of capability gets.
func (c *Config) RetriesFor(capability string) int {
	n, ok := c.CapabilityRetries[capability]
	switch {
	case ok:
	case c.IsWrite(capability):
		n = c.WriteRetries
	default:
		n = c.Retries
	}
	return max(n, 0)
}

// hedgeable reports why a capability configured for hedging may not be:
// writes are never hedged.
func (c *Config) hedgeable(capability string) error {
	if err := streams.ValidateCapability(capability); err != nil {
		return fmt.Errorf("hedge for %w", err)
	}
	if c.IsWrite(capability) {
		return fmt.Errorf("hedge for %s: a write is never hedged (a second delivery could execute it twice)", capability)
	}
	return nil
}
