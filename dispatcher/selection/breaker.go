package selection

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// BreakerState is the state of one instance's circuit breaker.
type BreakerState string

// Breaker states.
const (
	BreakerClosed   BreakerState = "CLOSED"
	BreakerOpen     BreakerState = "OPEN"
	BreakerHalfOpen BreakerState = "HALF_OPEN"
)

// BreakerConfig sets when an instance's breaker opens and how it recovers.
// The zero value means all defaults.
type BreakerConfig struct {
	// ConsecutiveFailures opens the breaker; default 10.
	ConsecutiveFailures int
	// FailureRatio: more than this share of failures over Window opens the
	// breaker, once MinVolume outcomes were seen; default 0.5.
	FailureRatio float64
	// Window is the span of the failure ratio; default 1 minute.
	Window time.Duration
	// MinVolume is the fewest outcomes in Window for the ratio to count;
	// default 20.
	MinVolume int
	// Cooldown is how long the breaker stays open; default 5 s.
	Cooldown time.Duration
	// Probes is how many tasks a half-open breaker admits; all must
	// succeed to close it; default 3.
	Probes int
	// Ramp is the share of its normal traffic an instance gets after its
	// breaker closes, stage by stage; default 0.25, 0.5, 1.
	Ramp []float64
	// RampStep is how long each ramp stage lasts; default 5 s.
	RampStep time.Duration
}

// SetDefaults fills in the zero fields with their defaults.
func (c *BreakerConfig) SetDefaults() {
	if c.ConsecutiveFailures == 0 {
		c.ConsecutiveFailures = 10
	}
	if c.FailureRatio == 0 {
		c.FailureRatio = 0.5
	}
	if c.Window == 0 {
		c.Window = time.Minute
	}
	if c.MinVolume == 0 {
		c.MinVolume = 20
	}
	if c.Cooldown == 0 {
		c.Cooldown = 5 * time.Second
	}
	if c.Probes == 0 {
		c.Probes = 3
	}
	if len(c.Ramp) == 0 {
		c.Ramp = []float64{0.25, 0.5, 1}
	}
	if c.RampStep == 0 {
		c.RampStep = 5 * time.Second
	}
}

// Validate reports a setting out of its range.
func (c *BreakerConfig) Validate() error {
	switch {
	case c.ConsecutiveFailures < 1:
		return fmt.Errorf("breaker ConsecutiveFailures must be at least 1, got %d", c.ConsecutiveFailures)
	case c.FailureRatio <= 0 || c.FailureRatio > 1:
		return fmt.Errorf("breaker FailureRatio must be in (0,1], got %v", c.FailureRatio)
	case c.Window < time.Second || c.Cooldown <= 0 || c.RampStep <= 0:
		return fmt.Errorf("breaker Window must be at least 1s and Cooldown, RampStep positive")
	case c.MinVolume < 1 || c.Probes < 1:
		return fmt.Errorf("breaker MinVolume and Probes must be at least 1")
	}
	for _, s := range c.Ramp {
		if s <= 0 || s > 1 {
			return fmt.Errorf("breaker Ramp shares must be in (0,1], got %v", c.Ramp)
		}
	}
	return nil
}

// windowBuckets divides the failure-ratio window.
const windowBuckets = 20

// Breaker is one instance's circuit breaker. Time is passed in, so the
// state machine can be driven by tests; its methods are safe for
// concurrent use. Its window geometry and ramp come from cfg, the
// dispatcher's Config; Allow and Record take the thresholds of the task
// at hand (its capability's policy), so an instance is judged by the
// breaker settings of each task's capability.
type Breaker struct {
	cfg  *BreakerConfig
	rand func() float64

	mu          sync.Mutex
	state       BreakerState
	consecutive int
	buckets     [windowBuckets]outcomeBucket
	openedAt    time.Time
	probes      int // admitted while half-open
	probeOK     int
	closedAt    time.Time // start of the ramp; zero when never opened
}

type outcomeBucket struct {
	slot     int64 // which window slot the counts belong to
	ok, fail int
}

// NewBreaker returns a closed breaker with cfg's window and ramp (cfg has
// its defaults set).
func NewBreaker(cfg *BreakerConfig) *Breaker {
	return &Breaker{cfg: cfg, rand: rand.Float64, state: BreakerClosed}
}

// Allow reports whether a task may go to the instance now, and whether it
// is a half-open probe (whose outcome must be recorded as one).
func (b *Breaker) Allow(now time.Time, cfg *BreakerConfig) (admit, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen && now.Sub(b.openedAt) >= cfg.Cooldown {
		b.state, b.probes, b.probeOK = BreakerHalfOpen, 0, 0
	}
	switch b.state {
	case BreakerOpen:
		return false, false
	case BreakerHalfOpen:
		if b.probes < cfg.Probes {
			b.probes++
			return true, true
		}
		return false, false
	}
	if s := b.shareLocked(now); s < 1 {
		return b.rand() < s, false
	}
	return true, false
}

// Record adds an outcome and returns the new state when it changed.
func (b *Breaker) Record(now time.Time, success, probe bool, cfg *BreakerConfig) (BreakerState, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerOpen:
		return "", false // a late outcome from before the breaker opened
	case BreakerHalfOpen:
		if !probe {
			return "", false
		}
		if !success {
			b.openLocked(now)
			return BreakerOpen, true
		}
		if b.probeOK++; b.probeOK >= cfg.Probes {
			b.closeLocked(now)
			return BreakerClosed, true
		}
		return "", false
	}
	bk := &b.buckets[b.slot(now)%windowBuckets]
	if s := b.slot(now); bk.slot != s {
		*bk = outcomeBucket{slot: s}
	}
	if success {
		bk.ok++
		b.consecutive = 0
		return "", false
	}
	bk.fail++
	b.consecutive++
	if b.consecutive >= cfg.ConsecutiveFailures {
		b.openLocked(now)
		return BreakerOpen, true
	}
	ok, fail := b.windowLocked(now)
	if ok+fail >= cfg.MinVolume && float64(fail) > cfg.FailureRatio*float64(ok+fail) {
		b.openLocked(now)
		return BreakerOpen, true
	}
	return "", false
}

func (b *Breaker) slot(now time.Time) int64 {
	return now.UnixNano() / int64(b.cfg.Window/windowBuckets)
}

func (b *Breaker) windowLocked(now time.Time) (ok, fail int) {
	cur := b.slot(now)
	for _, bk := range b.buckets {
		if cur-bk.slot < windowBuckets {
			ok += bk.ok
			fail += bk.fail
		}
	}
	return ok, fail
}

func (b *Breaker) openLocked(at time.Time) {
	b.state, b.openedAt = BreakerOpen, at
	b.consecutive = 0
	b.buckets = [windowBuckets]outcomeBucket{}
}

func (b *Breaker) closeLocked(at time.Time) {
	b.state, b.closedAt = BreakerClosed, at
	b.consecutive = 0
	b.buckets = [windowBuckets]outcomeBucket{}
}

// Adopt applies a transition another replica made (at is the server's
// time of it): replicas agree on OPEN and CLOSED.
func (b *Breaker) Adopt(state BreakerState, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case state == BreakerOpen && b.state != BreakerOpen && at.After(b.closedAt):
		b.openLocked(at)
	case state == BreakerClosed && b.state != BreakerClosed && at.After(b.openedAt):
		b.closeLocked(at)
	}
}

// shareLocked is the share of normal traffic admitted while ramping up.
func (b *Breaker) shareLocked(now time.Time) float64 {
	if b.closedAt.IsZero() {
		return 1
	}
	stage := int(now.Sub(b.closedAt) / b.cfg.RampStep)
	if stage < 0 || stage >= len(b.cfg.Ramp) {
		return 1
	}
	return b.cfg.Ramp[stage]
}

// BreakerStatus describes one instance's breaker.
type BreakerStatus struct {
	Instance            string       `json:"instance"`
	State               BreakerState `json:"state"`
	ConsecutiveFailures int          `json:"consecutive_failures"`
	WindowFailures      int          `json:"window_failures"`
	WindowTotal         int          `json:"window_total"`
	Share               float64      `json:"share"`
	Penalty             float64      `json:"penalty"`
	LatencyMS           float64      `json:"latency_ms"`
}

// Status describes the breaker at now (Instance, Penalty and LatencyMS
// are left for the caller).
func (b *Breaker) Status(now time.Time) BreakerStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok, fail := b.windowLocked(now)
	state := b.state
	if state == BreakerOpen && now.Sub(b.openedAt) >= b.cfg.Cooldown {
		state = BreakerHalfOpen
	}
	share := b.shareLocked(now)
	if state != BreakerClosed {
		share = 0
	}
	return BreakerStatus{State: state, ConsecutiveFailures: b.consecutive, WindowFailures: fail, WindowTotal: ok + fail, Share: share}
}
