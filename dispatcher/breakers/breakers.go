package breakers

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/internal/kvwatch"
	"github.com/agent-reach/agentreach/registry"
)

// queued bounds the transitions waiting to be written; past it a
// transition stays local.
const queued = 64

// writeTimeout bounds writing one transition.
const writeTimeout = 2 * time.Second

// record is a breaker transition as stored in REACH_BREAKERS under the
// instance id; the entry's server timestamp is the time of the transition.
type record struct {
	State selection.BreakerState `json:"state"`
	By    string                 `json:"by"`
}

type share struct {
	id    string
	state selection.BreakerState
}

// Sharing shares one replica's breakers with the others. Set its fields
// before Run; Changed is safe for concurrent use.
type Sharing struct {
	// KV is REACH_BREAKERS.
	KV jetstream.KeyValue
	NC *nats.Conn
	// By names this replica: its own records are not adopted back.
	By string
	// Loads holds the breakers of the instances this replica routes to.
	Loads *selection.Loads
	// Live reports whether instance id is in the routing table: a
	// transition of one that left is not adopted.
	Live func(id string) bool
	Log  *zerolog.Logger

	once sync.Once
	out  chan share
}

func (s *Sharing) queue() chan share {
	s.once.Do(func() { s.out = make(chan share, queued) })
	return s.out
}

// Changed shares a transition this replica made with the others. It runs
// where replies are handled, so it only queues the write; when the queue
// is full the transition stays local (the breaker works all the same).
func (s *Sharing) Changed(id string, state selection.BreakerState) {
	s.Log.Info().Str("node", id).Str("state", string(state)).Msg("breaker changed")
	select {
	case s.queue() <- share{id: id, state: state}:
	default:
		s.Log.Warn().Str("node", id).Msg("breaker transition not shared: too many queued")
	}
}

// Run writes queued transitions to REACH_BREAKERS, in order, and adopts
// the other replicas' as they come, until ctx ends; it returns when both
// have stopped.
func (s *Sharing) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		kvwatch.Run(ctx, s.NC, s.KV, registry.DefaultReconcileInterval, feed{s}, *s.Log, nil)
	}()
	s.write(ctx)
	<-done
}

// write writes queued transitions until ctx ends.
func (s *Sharing) write(ctx context.Context) {
	out := s.queue()
	for {
		select {
		case <-ctx.Done():
			return
		case sh := <-out:
			b, _ := json.Marshal(record{State: sh.state, By: s.By})
			pctx, cancel := context.WithTimeout(ctx, writeTimeout)
			if _, err := s.KV.Put(pctx, sh.id, b); err != nil {
				s.Log.Warn().Err(err).Str("node", sh.id).Msg("breaker transition not shared")
			}
			cancel()
		}
	}
}

// feed applies other replicas' transitions (kvwatch handler).
type feed struct{ s *Sharing }

func (f feed) Replace(listing map[string]jetstream.KeyValueEntry) {
	for _, e := range listing {
		f.Apply(e)
	}
}

func (f feed) Apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var rec record
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.By == f.s.By {
		return
	}
	if !f.s.Live(e.Key()) {
		return
	}
	f.s.Loads.Of(e.Key()).Breaker.Adopt(rec.State, e.Created())
}
