package durable

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/streams"
)

// Replayer resubmits dead letters whose capability is healthy again: every
// Interval while it runs (Start), or once (ReplayOnce). Set its fields
// before Start; Stop is idempotent and waits for the loop.
type Replayer struct {
	JS       jetstream.JetStream
	Subjects streams.Subjects
	// Interval between rounds; negative: no rounds (ReplayOnce still works).
	Interval time.Duration
	// Rate is the most resubmissions per second.
	Rate float64
	// Healthy reports whether capability can take a task now.
	Healthy func(capability string) bool
	// Options are given to every Replay (ReplaySign).
	Options []ReplayOption
	// Replayed, if set, is called once per resubmission.
	Replayed func()
	Log      zerolog.Logger

	stop func()
}

// Start runs a round every Interval until Stop.
func (r *Replayer) Start() {
	if r.Interval < 0 {
		r.stop = func() {}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(r.Interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if n, err := r.ReplayOnce(ctx); err != nil || n > 0 {
					r.Log.Info().Err(err).Int("replayed", n).Msg("dead letters replayed")
				}
			}
		}
	}()
	var once bool
	r.stop = func() {
		if !once {
			once = true
			cancel()
			<-done
		}
	}
}

// Stop ends the rounds and waits for the one running.
func (r *Replayer) Stop() {
	if r.stop != nil {
		r.stop()
	}
}

// ReplayOnce resubmits the dead letters of every capability that has a
// healthy instance now, at most Rate per second, and returns how many it
// resubmitted. Entries that fail again come back with their count raised.
func (r *Replayer) ReplayOnce(ctx context.Context) (int, error) {
	list, err := ListParked(ctx, r.JS, r.Subjects, streams.StreamDLQ)
	if err != nil {
		return 0, err
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Seq < list[j].Seq })
	gap := time.Duration(float64(time.Second) / r.Rate)
	n := 0
	for _, p := range list {
		if !r.Healthy(p.Capability) || p.Header.Get(streams.HeaderDLQDropped) != "" {
			continue // nothing to run it on now; or nothing to run (Replay says why)
		}
		if n > 0 {
			select {
			case <-ctx.Done():
				return n, ctx.Err()
			case <-time.After(gap):
			}
		}
		if err := Replay(ctx, r.JS, r.Subjects, p, time.Time{}, r.Options...); errors.Is(err, ErrNotReplayable) {
			r.Log.Warn().Err(err).Str("request_id", p.RequestID).Msg("dead letter left parked")
			continue
		} else if err != nil {
			return n, err
		}
		n++
		if r.Replayed != nil {
			r.Replayed()
		}
	}
	return n, nil
}
