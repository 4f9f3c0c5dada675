package selection

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-reach/agentreach/registry"
)

// Latency tracking of the least-load strategy.
const (
	// latencyAlpha weighs a new latency sample in the moving average, which
	// is taken over logarithms (a geometric mean): one stray spike moves it
	// little, a consistently slow instance within a few dozen tasks. Task
	// times vary a lot (the log of an exponential time has a standard
	// deviation of 1.28); at 0.05 the average of equally fast instances
	// stays within a factor of 1.23 of the truth (one σ), so two of them
	// differ by 2× less than 1% of the time, while at 0.2 it was 13%, and a
	// 10× slower instance flickered in and out of being judged slower.
	latencyAlpha = 0.05
	// latencyDecay is the time constant with which an instance's average
	// fades while it gets no task, so an instance once found slow is probed
	// again rather than starved forever.
	latencyDecay = 5 * time.Second
	// slowerRatio and slowerMargin say when one instance counts as slower
	// than another: both must hold, so that noise among equally fast
	// instances never overrides their weights. On a loaded two-core machine
	// under the race detector, instances answering at once were measured at
	// 1.2–2.7 ms, so the margin is 2 ms: below it, differences are the
	// transport's jitter rather than the instances'.
	slowerRatio  = 2
	slowerMargin = 2 * time.Millisecond
	// minSamples is how many latencies an instance needs before it can be
	// judged slower or faster: a first task that meets a cold cache or a
	// GC pause must not brand an instance.
	minSamples = 5
	// placing counts the task being placed as a quarter slot in the
	// weighted comparison. In-flight counts are small integers, and with 0
	// the lightly weighted instances were measured to get about 10% more
	// than their share, with 0.5 about 10% less; 0.25 cancels that bias.
	placing = 0.25
)

// Load is this replica's view of one instance: its tasks in flight from
// here, a moving average of how long its tasks take, its failure penalty and
// its circuit breaker. Its methods are safe for concurrent use.
type Load struct {
	// Inflight counts the instance's tasks from this replica: Reserve takes
	// a slot, whoever ends the delivery gives it back.
	Inflight atomic.Int64
	// others estimates the instance's tasks from other replicas, from the
	// Reach-Active count on its latest reply; -1 until a reply carried one.
	others atomic.Int64
	// unsubscribed is the revision of the instance's record when a delivery
	// found no subscription on its subject (0: never), at unsubscribedAt
	// (unix ns): the instance gets no task until a newer record (a
	// heartbeat after it) shows it back, or one heartbeat interval has
	// passed without one (after a server restart an agent subscribes again
	// before the store takes its next heartbeat).
	unsubscribed   atomic.Uint64
	unsubscribedAt atomic.Int64
	Breaker        *Breaker

	mu        sync.Mutex
	qual      float64 // moving average of feedback scores (Client.Feedback)
	qualN     int
	logEWMA   float64 // moving average of ln(latency in ns)
	samples   int
	lastAt    time.Time
	penalty   float64 // as of penaltyAt
	penaltyAt time.Time
}

// MarkAbsent records that a delivery to inst found no subscription.
func (l *Load) MarkAbsent(inst *registry.Instance) {
	l.unsubscribedAt.Store(time.Now().UnixNano())
	l.unsubscribed.Store(inst.Entry().Revision)
}

// Absent reports whether inst had no subscription at its current record,
// less than one of its heartbeat intervals ago.
func (l *Load) Absent(inst *registry.Instance) bool {
	u := l.unsubscribed.Load()
	if u == 0 {
		return false
	}
	e := inst.Entry()
	return u == e.Revision && time.Now().UnixNano()-l.unsubscribedAt.Load() < e.HeartbeatMS*int64(time.Millisecond)
}

// Observe adds one task's latency to the average. Until minSamples
// latencies have come in, the average is their plain mean, so no single
// early task (a cold start, or the machine stalling while it ran) outweighs
// the others; an average seeded with the first latency kept four fifths of
// it after five tasks and could brand an instance slower than it is.
func (l *Load) Observe(d time.Duration, now time.Time) {
	x := math.Log(float64(max(d, time.Microsecond)))
	l.mu.Lock()
	defer l.mu.Unlock()
	alpha := latencyAlpha
	if l.samples < minSamples {
		alpha = 1 / float64(l.samples+1)
	}
	l.logEWMA = alpha*x + (1-alpha)*l.logLatency(now)
	l.samples++
	l.lastAt = now
}

// logLatency is the average faded by the time since the last sample; l.mu
// is held.
func (l *Load) logLatency(now time.Time) float64 {
	return l.logEWMA - float64(now.Sub(l.lastAt))/float64(latencyDecay)
}

// qualityAlpha weighs a new feedback score in the quality average.
const qualityAlpha = 0.1

// ObserveQuality folds a feedback score into the quality average.
func (l *Load) ObserveQuality(score float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.qualN == 0 {
		l.qual = score
	} else {
		l.qual = qualityAlpha*score + (1-qualityAlpha)*l.qual
	}
	l.qualN++
}

// Quality returns the quality average and how many scores it holds.
func (l *Load) Quality() (float64, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.qual, l.qualN
}

// Reserve takes one of the instance's slots, unless all limit of them are
// in use.
func (l *Load) Reserve(limit int64) bool {
	for {
		n := l.Inflight.Load()
		if n >= limit {
			return false
		}
		if l.Inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// CurrentLatency is the average in nanoseconds, 0 until minSamples.
func (l *Load) CurrentLatency(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.samples < minSamples {
		return 0
	}
	return math.Exp(l.logLatency(now))
}

// Penalize adds p to the instance's penalty, which then fades linearly to
// zero over decay.
func (l *Load) Penalize(p float64, decay time.Duration, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.penalty = l.penaltyLocked(decay, now) + p
	l.penaltyAt = now
}

// CurrentPenalty is the penalty at now, faded over decay.
func (l *Load) CurrentPenalty(decay time.Duration, now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.penaltyLocked(decay, now)
}

func (l *Load) penaltyLocked(decay time.Duration, now time.Time) float64 {
	if l.penalty == 0 || decay <= 0 {
		return 0
	}
	return l.penalty * max(0, 1-float64(now.Sub(l.penaltyAt))/float64(decay))
}

// Loads holds a replica's Load of every instance it has routed to. Set
// Breaker and PenaltyDecay before use; its methods are safe for concurrent
// use.
type Loads struct {
	Breaker      *BreakerConfig // the window and ramp of every instance's breaker
	PenaltyDecay time.Duration  // how long a failure penalty takes to fade
	m            sync.Map       // instance id → *Load
}

// Of returns this replica's record of an instance.
func (ls *Loads) Of(id string) *Load {
	return lookup(&ls.m, id, func() *Load {
		fresh := &Load{Breaker: NewBreaker(ls.Breaker)}
		fresh.others.Store(-1)
		return fresh
	})
}

// Delete drops the record of an instance that left the table.
func (ls *Loads) Delete(id string) { ls.m.Delete(id) }

// Range calls f for every instance's record until f returns false.
func (ls *Loads) Range(f func(id string, l *Load) bool) {
	ls.m.Range(func(k, v any) bool { return f(k.(string), v.(*Load)) })
}

// Breakers returns the breaker of every instance ls holds at now, with
// its penalty and latency, sorted by instance id.
func (ls *Loads) Breakers(now time.Time) []BreakerStatus {
	var out []BreakerStatus
	ls.Range(func(id string, l *Load) bool {
		s := l.Breaker.Status(now)
		s.Instance = id
		s.Penalty = l.CurrentPenalty(ls.PenaltyDecay, now)
		s.LatencyMS = l.CurrentLatency(now) / 1e6
		out = append(out, s)
		return true
	})
	slices.SortFunc(out, func(a, b BreakerStatus) int { return strings.Compare(a.Instance, b.Instance) })
	return out
}

// lookup returns m's value for key, storing fresh() first when it has none.
// Values are made only on a miss; the first one stored wins a race.
func lookup[T any](m *sync.Map, key string, fresh func() *T) *T {
	if v, ok := m.Load(key); ok {
		return v.(*T)
	}
	v, _ := m.LoadOrStore(key, fresh())
	return v.(*T)
}

// NoteActive reads the Reach-Active count of a reply (v, "" when it has
// none): the instance's tasks minus this replica's own (mine, counted at the
// same moment) are other replicas' load.
func (l *Load) NoteActive(v string, mine int64) {
	if v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			l.others.Store(max(n-mine, 0))
		}
	}
}

// busy is the fraction of an instance's slots in use, plus its failure
// penalty. Slots in use are this replica's in-flight tasks plus the other
// replicas' share: from the instance's latest reply, or else from its last
// heartbeat (whose count includes this replica's tasks, so only the excess
// is taken).
func (ls *Loads) busy(inst *registry.Instance, l *Load, now time.Time) float64 {
	e := inst.Entry()
	own := l.Inflight.Load()
	others := l.others.Load()
	if others < 0 {
		others = max(int64(e.Active)-own, 0)
	}
	return float64(own+others)/float64(e.MaxConcurrent) + l.CurrentPenalty(ls.PenaltyDecay, now)
}

// Lighter reports whether instance b should get the next task rather than
// a. When one is clearly slower (by slowerRatio and slowerMargin) the cost
// is latency × (busy + 1/max_concurrent), as in peak-EWMA balancers, so a
// slow instance gets work only when the fast ones queue up. Otherwise the
// cost is (busy + placing/max_concurrent) / weight, so equally fast
// instances settle at in-flight counts, and throughput, in proportion to
// their weights; two idle instances tie, and the weighted draw decides.
func (ls *Loads) Lighter(a, b *registry.Instance) bool {
	la, lb := ls.Of(a.ID), ls.Of(b.ID)
	now := time.Now()
	ta, tb := la.CurrentLatency(now), lb.CurrentLatency(now)
	if clearlySlower(ta, tb) || clearlySlower(tb, ta) {
		ca := ta * (ls.busy(a, la, now) + 1/float64(a.Entry().MaxConcurrent))
		cb := tb * (ls.busy(b, lb, now) + 1/float64(b.Entry().MaxConcurrent))
		return cb < ca
	}
	ba, bb := ls.busy(a, la, now), ls.busy(b, lb, now)
	if ba == 0 && bb == 0 {
		return false // both idle: the weighted draw decides
	}
	return (bb+placing/float64(b.Entry().MaxConcurrent))/float64(b.Entry().Weight) < (ba+placing/float64(a.Entry().MaxConcurrent))/float64(a.Entry().Weight)
}

// clearlySlower reports whether latency x is clearly above y.
func clearlySlower(x, y float64) bool {
	return y > 0 && x > slowerRatio*y && x-y > float64(slowerMargin)
}
