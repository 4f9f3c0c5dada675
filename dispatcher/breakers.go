package dispatcher

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/selection"
)

// breakerRecord is a breaker transition as stored in REACH_BREAKERS under the
// instance id; the entry's server timestamp is the time of the transition.
type breakerRecord struct {
	State selection.BreakerState `json:"state"`
	By    string                 `json:"by"`
}

// breakerChanged shares a transition this replica made with the others. It
// runs where replies are handled, so it only queues the write; when the
// queue is full the transition stays local (the breaker works all the same).
func (d *Dispatcher) breakerChanged(id string, state selection.BreakerState) {
	d.log.Info().Str("node", id).Str("state", string(state)).Msg("breaker changed")
	select {
	case d.breakerOut <- breakerShare{id: id, state: state}:
	default:
		d.log.Warn().Str("node", id).Msg("breaker transition not shared: too many queued")
	}
}

type breakerShare struct {
	id    string
	state selection.BreakerState
}

// shareBreakers writes queued transitions to REACH_BREAKERS, in order,
// until ctx ends.
func (d *Dispatcher) shareBreakers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-d.breakerOut:
			b, _ := json.Marshal(breakerRecord{State: s.state, By: d.cfg.Name})
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if _, err := d.breakerKV.Put(pctx, s.id, b); err != nil {
				d.log.Warn().Err(err).Str("node", s.id).Msg("breaker transition not shared")
			}
			cancel()
		}
	}
}

// breakerFeed applies other replicas' transitions (kvwatch handler).
type breakerFeed struct{ d *Dispatcher }

func (f breakerFeed) Replace(listing map[string]jetstream.KeyValueEntry) {
	for _, e := range listing {
		f.Apply(e)
	}
}

func (f breakerFeed) Apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var rec breakerRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.By == f.d.cfg.Name {
		return
	}
	if _, live := f.d.table.Lookup(e.Key()); !live {
		return
	}
	f.d.loads.Of(e.Key()).Breaker.Adopt(rec.State, e.Created())
}

// Breakers returns the breaker of every instance this replica has routed to,
// sorted by instance id.
func (d *Dispatcher) Breakers() []selection.BreakerStatus {
	now := time.Now()
	var out []selection.BreakerStatus
	d.loads.Range(func(id string, l *selection.Load) bool {
		s := l.Breaker.Status(now)
		s.Instance = id
		s.Penalty = l.CurrentPenalty(d.cfg.PenaltyDecay, now)
		s.LatencyMS = l.CurrentLatency(now) / 1e6
		out = append(out, s)
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out
}
