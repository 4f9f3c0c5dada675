package dispatcher

import (
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
// needs of the policy is in capPolicy, cached per capability for each
// policy snapshot, so the hot path pays one map read and a pointer
// comparison.

// capPolicy is one capability's resolved policy.
type capPolicy struct {
	set        *policy.Set // the snapshot it was resolved from; nil: none yet
	strategy   string
	retries    int // ≥ 0
	write      bool
	idempotent bool
	ackTimeout time.Duration
	minCall    time.Duration
	maxCall    time.Duration
	deadline   time.Duration
	queueWait  time.Duration
	// maxInFlight caps this replica's tasks of the capability (0: no cap),
	// counted in inflight, which outlives policy changes.
	maxInFlight int
	inflight    *atomic.Int64
	breaker     *selection.BreakerConfig
	require     declare.Requirement
	// hedge is the capability's hedging (nil: off); from Config.Hedges it
	// is the operator's word that hedging is safe, from the policy it needs
	// idempotent here or the declarations' say-so (hedgeSafe).
	hedge           *selection.HedgeConfig
	hedgeFromConfig bool
	quorum          *float64 // a broadcast's default completion policy
}

// policy returns capability's resolved policy under the current snapshot.
func (d *Dispatcher) policy(capability string) *capPolicy {
	var set *policy.Set
	if d.policies != nil {
		set = d.policies.Current()
	}
	if v, ok := d.pols.Load(capability); ok {
		if p := v.(*capPolicy); p.set == set {
			return p
		}
	}
	p := d.resolvePolicy(capability, set)
	d.pols.Store(capability, p)
	return p
}

// resolvePolicy overlays set's policy for capability on the Config.
func (d *Dispatcher) resolvePolicy(capability string, set *policy.Set) *capPolicy {
	c := &d.cfg
	p := &capPolicy{
		set: set, strategy: c.DefaultStrategy, retries: c.RetriesFor(capability), write: c.IsWrite(capability),
		ackTimeout: c.AckTimeout, minCall: c.MinCallTimeout, maxCall: c.MaxCallTimeout, deadline: c.Deadline,
		queueWait: c.QueueWait, breaker: &c.Breaker,
		inflight: lookup(&d.capInflight, capability, func() *atomic.Int64 { return new(atomic.Int64) }),
	}
	if name, ok := c.Strategies[capability]; ok {
		p.strategy = name
	}
	if h, ok := c.Hedges[capability]; ok {
		h.SetDefaults()
		p.hedge, p.hedgeFromConfig = &h, true
	}
	if set == nil {
		return p
	}
	cp := set.For(capability)
	if cp.Strategy != nil {
		p.strategy = *cp.Strategy
	}
	if cp.Write != nil {
		p.write = *cp.Write
	}
	switch {
	case cp.Retries != nil:
		p.retries = max(*cp.Retries, 0)
	case cp.Write != nil && *cp.Write:
		p.retries = max(c.WriteRetries, 0)
	}
	if cp.Idempotent != nil {
		p.idempotent = *cp.Idempotent
	}
	setDuration(&p.ackTimeout, cp.AckTimeout)
	setDuration(&p.minCall, cp.MinCallTimeout)
	setDuration(&p.maxCall, cp.MaxCallTimeout)
	setDuration(&p.deadline, cp.Deadline)
	if cp.QueueWait != nil {
		p.queueWait = time.Duration(*cp.QueueWait)
		if p.queueWait == 0 {
			p.queueWait = -1 // the policy's 0 is "no wait"; the Config's means the default
		}
	}
	if cp.MaxInFlight != nil {
		p.maxInFlight = *cp.MaxInFlight
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
		p.breaker = &b
	}
	if cp.Require != nil {
		p.require = *cp.Require
	}
	if hp := cp.Hedge; hp != nil {
		p.hedge, p.hedgeFromConfig = nil, false
		if !hp.Off {
			h := selection.HedgeConfig{}
			if hp.AfterMS != nil {
				h.After = time.Duration(*hp.AfterMS) * time.Millisecond
			}
			h.Percentile, _ = hp.Percentile() // validated with the policy
			setValue(&h.Budget, hp.Budget)
			h.SetDefaults()
			p.hedge = &h
		}
	}
	if p.write {
		p.hedge = nil // never: a second delivery could execute it twice
	}
	p.quorum = cp.Quorum
	if !selection.Known(p.strategy) {
		// policy.StrategyNames and strategies agree (a test says so); a
		// name neither knows cannot have passed validation.
		p.strategy = c.DefaultStrategy
	}
	if p.maxCall < p.minCall {
		p.maxCall = p.minCall
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

// Quorum returns the completion policy REACH_POLICY gives broadcasts of
// capability ("quorum": a fraction below 1 or a count), if it gives one.
func (d *Dispatcher) Quorum(capability string) (float64, bool) {
	if q := d.policy(capability).quorum; q != nil {
		return *q, true
	}
	return 0, false
}

// CallTimeoutSlack is added to max(caller's wish, agent's hint).
const CallTimeoutSlack = 2 * time.Second

// callTimeout is max(wish, hint) + slack, clamped to the policy's
// [minCall, maxCall].
func (p *capPolicy) callTimeout(wish, hint time.Duration) time.Duration {
	return min(max(max(wish, hint)+CallTimeoutSlack, p.minCall), p.maxCall)
}

// admitCapability takes one of the capability's in-flight slots when its
// policy caps them; release with releaseCapability.
func (p *capPolicy) admitCapability() bool {
	if p.maxInFlight <= 0 {
		return true
	}
	if p.inflight.Add(1) > int64(p.maxInFlight) {
		p.inflight.Add(-1)
		return false
	}
	return true
}

func (p *capPolicy) releaseCapability() {
	if p.maxInFlight > 0 {
		p.inflight.Add(-1)
	}
}
