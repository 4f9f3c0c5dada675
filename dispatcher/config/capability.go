package config

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/registry/policy"
)

// Live policy (docs/declarations.md, Policy). Every setting of a capability comes from three
// layers: the dispatcher's Config (its flags), REACH_POLICY's "defaults"
// over it, and "capability.<cap>" over that. The dispatcher watches the
// bucket (registry.PolicyWatcher), so a change takes effect with the next
// task, within milliseconds of the put and without a restart; a value that
// does not validate is ignored, logged, and the last good one stays.
//
// A task resolves its capability's policy once, when it starts: what it
// needs of the policy is in Capability, cached per capability for each
// policy snapshot (Capabilities), so the hot path pays one map read and a
// pointer comparison.

// Capability is one capability's resolved settings: the Config with the
// policy snapshot it was resolved from over it. It is read-only once
// resolved, except for its in-flight count.
type Capability struct {
	Set        *policy.Set // the snapshot it was resolved from; nil: none yet
	Strategy   string
	Retries    int // ≥ 0
	Write      bool
	Idempotent bool
	AckTimeout time.Duration
	MinCall    time.Duration
	MaxCall    time.Duration
	Deadline   time.Duration
	// QueueWait is how long a task waits for a free slot: > 0 a wait,
	// otherwise none.
	QueueWait time.Duration
	// MaxInFlight caps this replica's tasks of the capability (0: no cap),
	// counted in inflight, which outlives policy changes (Admit, Release).
	MaxInFlight int
	inflight    *atomic.Int64
	Breaker     *selection.BreakerConfig
	Require     declare.Requirement
	// Hedge is the capability's hedging (nil: off); from Config.Hedges it
	// is the operator's word that hedging is safe (HedgeFromConfig), from
	// the policy it needs Idempotent or the declarations' say-so.
	Hedge           *selection.HedgeConfig
	HedgeFromConfig bool
	Quorum          *float64 // a broadcast's default completion policy
}

// Capabilities resolves and caches each capability's settings under the
// policy snapshot in force. Its zero value is ready once Config is set;
// it is safe for concurrent use.
type Capabilities struct {
	// Config is the replica's configuration the policy goes over.
	Config   *Config
	resolved sync.Map // capability → *Capability, resolved from the latest snapshot seen
	inflight sync.Map // capability → *atomic.Int64, its tasks in flight here
}

// For returns capability's settings under the snapshot set (nil: no policy).
func (cs *Capabilities) For(capability string, set *policy.Set) *Capability {
	if v, ok := cs.resolved.Load(capability); ok {
		if p := v.(*Capability); p.Set == set {
			return p
		}
	}
	p := cs.resolve(capability, set)
	cs.resolved.Store(capability, p)
	return p
}

// resolve overlays set's policy for capability on the Config.
func (cs *Capabilities) resolve(capability string, set *policy.Set) *Capability {
	c := cs.Config
	n, ok := cs.inflight.Load(capability)
	if !ok {
		n, _ = cs.inflight.LoadOrStore(capability, new(atomic.Int64))
	}
	p := &Capability{
		Set: set, Strategy: c.DefaultStrategy, Retries: c.RetriesFor(capability), Write: c.IsWrite(capability),
		AckTimeout: c.AckTimeout, MinCall: c.MinCallTimeout, MaxCall: c.MaxCallTimeout, Deadline: c.Deadline,
		QueueWait: c.QueueWait, Breaker: &c.Breaker, inflight: n.(*atomic.Int64),
	}
	if name, ok := c.Strategies[capability]; ok {
		p.Strategy = name
	}
	if h, ok := c.Hedges[capability]; ok {
		h.SetDefaults()
		p.Hedge, p.HedgeFromConfig = &h, true
	}
	if set == nil {
		return p
	}
	cp := set.For(capability)
	if cp.Strategy != nil {
		p.Strategy = *cp.Strategy
	}
	if cp.Write != nil {
		p.Write = *cp.Write
	}
	switch {
	case cp.Retries != nil:
		p.Retries = max(*cp.Retries, 0)
	case cp.Write != nil && *cp.Write:
		p.Retries = max(c.WriteRetries, 0)
	}
	if cp.Idempotent != nil {
		p.Idempotent = *cp.Idempotent
	}
	setDuration(&p.AckTimeout, cp.AckTimeout)
	setDuration(&p.MinCall, cp.MinCallTimeout)
	setDuration(&p.MaxCall, cp.MaxCallTimeout)
	setDuration(&p.Deadline, cp.Deadline)
	if cp.QueueWait != nil {
		p.QueueWait = time.Duration(*cp.QueueWait)
		if p.QueueWait == 0 {
			p.QueueWait = -1 // the policy's 0 is "no wait"; the Config's means the default
		}
	}
	if cp.MaxInFlight != nil {
		p.MaxInFlight = *cp.MaxInFlight
	}
	if cp.Breaker != nil {
		b := c.Breaker
		bp := cp.Breaker
		setValue(&b.ConsecutiveFailures, bp.ConsecutiveFailures)
		setValue(&b.FailureRatio, bp.FailureRatio)
		setValue(&b.MinVolume, bp.MinVolume)
		setValue(&b.Probes, bp.Probes)
		setDuration(&b.Window, bp.Window)
		setDuration(&b.Cooldown, bp.Cooldown)
		p.Breaker = &b
	}
	if cp.Require != nil {
		p.Require = *cp.Require
	}
	if hp := cp.Hedge; hp != nil {
		p.Hedge, p.HedgeFromConfig = nil, false
		if !hp.Off {
			h := selection.HedgeConfig{}
			if hp.AfterMS != nil {
				h.After = time.Duration(*hp.AfterMS) * time.Millisecond
			}
			h.Percentile, _ = hp.Percentile() // validated with the policy
			setValue(&h.Budget, hp.Budget)
			h.SetDefaults()
			p.Hedge = &h
		}
	}
	if p.Write {
		p.Hedge = nil // never: a second delivery could execute it twice
	}
	p.Quorum = cp.Quorum
	if !selection.Known(p.Strategy) {
		// policy.StrategyNames and strategies agree (a test says so); a
		// name neither knows cannot have passed validation.
		p.Strategy = c.DefaultStrategy
	}
	if p.MaxCall < p.MinCall {
		p.MaxCall = p.MinCall
	}
	return p
}

func setDuration(field *time.Duration, v *policy.Duration) {
	if v != nil {
		*field = time.Duration(*v)
	}
}

func setValue[T any](field *T, v *T) {
	if v != nil {
		*field = *v
	}
}

// CallTimeoutSlack is added to max(caller's wish, agent's hint).
const CallTimeoutSlack = 2 * time.Second

// CallTimeout is max(wish, hint) + slack, clamped to the capability's
// [MinCall, MaxCall].
func (p *Capability) CallTimeout(wish, hint time.Duration) time.Duration {
	return min(max(max(wish, hint)+CallTimeoutSlack, p.MinCall), p.MaxCall)
}

// Admit takes one of the capability's in-flight slots when its policy
// caps them; give it back with Release.
func (p *Capability) Admit() bool {
	if p.MaxInFlight <= 0 {
		return true
	}
	if p.inflight.Add(1) > int64(p.MaxInFlight) {
		p.inflight.Add(-1)
		return false
	}
	return true
}

// Release gives back the slot Admit took.
func (p *Capability) Release() {
	if p.MaxInFlight > 0 {
		p.inflight.Add(-1)
	}
}
