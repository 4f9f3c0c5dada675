package registry

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/failrun"
)

// Heartbeat keeps one agent record alive by putting it every interval from a
// goroutine of its own. A put that fails is retried after a jittered
// fraction of a second (retryDelay) rather than a whole interval later,
// and after a reconnect the record is put again within a jittered quarter
// interval, so a record
// that expired while the store was unavailable is back within moments of
// the store answering. Give it a Registry opened on a NATS connection that
// the agent's work does not use, so an agent whose every slot is busy still
// heartbeats on time.
//
// Its methods are safe for concurrent use; Stop is idempotent.
type Heartbeat struct {
	reg      *Registry
	interval time.Duration
	log      zerolog.Logger

	mu     sync.Mutex
	rec    Record
	active atomic.Int64

	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// NewHeartbeat validates rec and prepares a heartbeat for it; rec.HeartbeatMS
// sets the interval. Nothing is written before Start.
func NewHeartbeat(reg *Registry, rec Record, log zerolog.Logger) (*Heartbeat, error) {
	rec.Normalize()
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	return &Heartbeat{
		reg:      reg,
		rec:      rec,
		interval: time.Duration(rec.HeartbeatMS) * time.Millisecond,
		log:      log.With().Str("agent", rec.ID).Logger(),
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}, nil
}

// Start writes the record once, so registration errors surface here, then
// keeps writing it every interval until Stop.
func (h *Heartbeat) Start(ctx context.Context) error {
	if err := h.put(ctx); err != nil {
		return err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go h.loop(loopCtx)
	return nil
}

func (h *Heartbeat) loop(ctx context.Context) {
	defer close(h.done)
	reconnected := h.reg.nc.StatusChanged(nats.CONNECTED)
	defer h.reg.nc.RemoveStatusListener(reconnected)
	next := time.NewTimer(h.interval)
	defer next.Stop()
	var failures failrun.Run
	for {
		select {
		case <-ctx.Done():
			return
		case <-next.C:
		case <-h.kick:
		case <-reconnected:
			// Every agent of a restarted server reconnects at once: each
			// puts after a random share of a quarter interval, not all
			// together and not a whole interval late.
			next.Reset(jitter(min(h.interval/4, time.Second)))
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, h.putTimeout())
		err := h.put(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			if n := failures.Succeeded(); n > 0 {
				h.log.Info().Int("failed_puts", n).Msg("heartbeat stored again")
			}
			next.Reset(h.interval)
			continue
		}
		retry := h.retryDelay()
		failures.Fail(&h.log, zerolog.WarnLevel).Err(err).Dur("retry_in", retry).Msg("heartbeat failed")
		next.Reset(retry)
	}
}

// putTimeout bounds one put: a fifth of an interval, between 250 ms and
// 1 s, so a put lost on a connection that stalled (a route waiting on TCP
// retransmission after a link came back) is sent again within a second.
func (h *Heartbeat) putTimeout() time.Duration {
	return min(max(h.interval/5, 250*time.Millisecond), time.Second)
}

// retryDelay is the wait before the next put after failed ones: drawn at
// random from the upper half of retryStep, so agents that failed together
// do not retry together.
//
// It does not back off. After a partition heals, a JetStream group whose
// replica was cut off campaigned meanwhile, and its leader steps down
// within about a Raft heartbeat (1 s) of hearing that replica's higher
// term again; the next leader comes only after NATS's election timeout
// (4-9 s). An agent on the cut-off side whose record expired gets it back
// at once only if a put lands in that first second, which a retry every
// 125-250 ms does and a backoff to a second mostly does not (the chaos
// suite's minority partition, docs/operations.md).
func (h *Heartbeat) retryDelay() time.Duration {
	d := h.retryStep()
	return d/2 + jitter(d/2)
}

// retryStep is a twentieth of the interval, between 50 and 250 ms: at
// most four puts a second per agent while the store takes none (a store
// without a leader answers each at once, "no responders").
func (h *Heartbeat) retryStep() time.Duration {
	return min(max(h.interval/20, 50*time.Millisecond), 250*time.Millisecond)
}

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}

func (h *Heartbeat) put(ctx context.Context) error {
	h.mu.Lock()
	rec := h.rec
	h.mu.Unlock()
	rec.Active = int(h.active.Load())
	_, err := h.reg.Put(ctx, rec)
	return err
}

// SetActive records how many tasks the agent is running; the next heartbeat
// reports it.
func (h *Heartbeat) SetActive(n int) { h.active.Store(int64(n)) }

// Update changes the record (e.g. status or timeout hint) and writes it at
// once instead of waiting for the next beat.
func (h *Heartbeat) Update(fn func(*Record)) {
	h.mu.Lock()
	fn(&h.rec)
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Record returns the current record.
func (h *Heartbeat) Record() Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rec
	r.Active = int(h.active.Load())
	return r
}

// MarkDraining writes status "draining" now, so dispatchers stop routing new
// tasks to this instance.
func (h *Heartbeat) MarkDraining(ctx context.Context) error {
	h.mu.Lock()
	h.rec.Status = StatusDraining
	h.mu.Unlock()
	return h.put(ctx)
}

// Stop ends the heartbeat and, when deregister is true, deletes the record.
// It waits for the heartbeat goroutine; calling it again does nothing.
func (h *Heartbeat) Stop(ctx context.Context, deregister bool) error {
	var err error
	h.once.Do(func() {
		if h.cancel != nil {
			h.cancel()
			<-h.done
		}
		if deregister {
			err = h.reg.Delete(ctx, h.rec.ID)
		}
	})
	return err
}
