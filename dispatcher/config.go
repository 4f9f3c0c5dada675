package dispatcher

import (
	"fmt"
	"time"

	"github.com/agent-reach/agentreach/streams"
)

// Defaults of Config.
const (
	DefaultQueueGroup  = "reach-dispatchers"
	DefaultAckTimeout  = 3 * time.Second
	DefaultDeadline    = 60 * time.Second
	DefaultMaxInFlight = 5000
	DefaultMaxAttempts = 3
	DefaultMaxHops     = 8
	DefaultStrategy    = StrategyLeastLoad
	// DefaultStartTimeout bounds Start when its context has no deadline.
	DefaultStartTimeout = 10 * time.Second
	// CallTimeoutSlack is added to max(caller's wish, agent's hint).
	CallTimeoutSlack = 2 * time.Second
	// MinCallTimeout and MaxCallTimeout clamp the per-call timeout.
	MinCallTimeout = 5 * time.Second
	MaxCallTimeout = 120 * time.Second
)

// Config configures a Dispatcher. The zero value means all defaults.
type Config struct {
	// Subjects names the subjects; zero means prefix "reach".
	Subjects streams.Subjects
	// QueueGroup is shared by all replicas; default "reach-dispatchers".
	QueueGroup string
	// Name identifies this replica in logs and stats; default a random id.
	Name string
	// AckTimeout is how long an instance has to answer ACKED before the task
	// goes elsewhere; default 3 s.
	AckTimeout time.Duration
	// Deadline is the overall deadline of a task whose caller sets no
	// Reach-Deadline; default 60 s.
	Deadline time.Duration
	// MaxInFlight caps the tasks this replica handles at once; beyond it
	// callers get OVERLOADED at once. Default 5000.
	MaxInFlight int
	// MaxAttempts bounds deliveries per task (no ACK, no responders and
	// TARGET_BUSY each use one); default 3.
	MaxAttempts int
	// MaxHops is the hop limit beyond which a task is LOOP_DETECTED; default 8.
	MaxHops int
	// DefaultStrategy picks instances for capabilities not in Strategies;
	// default "least_load".
	DefaultStrategy string
	// Strategies maps a capability to its strategy name: "least_load",
	// "round_robin", "weighted_round_robin" or "hash" (consistent hashing on
	// Reach-Affinity-Key).
	Strategies map[string]string
}

func (c *Config) setDefaults() {
	if c.QueueGroup == "" {
		c.QueueGroup = DefaultQueueGroup
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.Deadline == 0 {
		c.Deadline = DefaultDeadline
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxHops == 0 {
		c.MaxHops = DefaultMaxHops
	}
	if c.DefaultStrategy == "" {
		c.DefaultStrategy = DefaultStrategy
	}
}

func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.AckTimeout < 0 || c.Deadline < 0:
		return bad("timeouts must not be negative")
	case c.MaxInFlight < 1:
		return bad("MaxInFlight must be at least 1, got %d", c.MaxInFlight)
	case c.MaxAttempts < 1:
		return bad("MaxAttempts must be at least 1, got %d", c.MaxAttempts)
	case c.MaxHops < 1:
		return bad("MaxHops must be at least 1, got %d", c.MaxHops)
	}
	if _, ok := strategies[c.DefaultStrategy]; !ok {
		return bad("unknown default strategy %q (want one of %v)", c.DefaultStrategy, StrategyNames())
	}
	for capability, name := range c.Strategies {
		if err := streams.ValidateCapability(capability); err != nil {
			return bad("strategy for %v", err)
		}
		if _, ok := strategies[name]; !ok {
			return bad("unknown strategy %q for %s (want one of %v)", name, capability, StrategyNames())
		}
	}
	return nil
}

// callTimeout is max(wish, hint) + slack, clamped to [MinCallTimeout,
// MaxCallTimeout].
func callTimeout(wish, hint time.Duration) time.Duration {
	return min(max(max(wish, hint)+CallTimeoutSlack, MinCallTimeout), MaxCallTimeout)
}
