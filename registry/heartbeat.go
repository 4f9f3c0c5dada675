package registry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Heartbeat keeps one agent record alive by putting it every interval from a
// goroutine of its own. Give it a Registry opened on a NATS connection that
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
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.kick:
		}
		pctx, cancel := context.WithTimeout(ctx, h.interval)
		if err := h.put(pctx); err != nil && ctx.Err() == nil {
			h.log.Warn().Err(err).Msg("heartbeat failed")
		}
		cancel()
	}
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
