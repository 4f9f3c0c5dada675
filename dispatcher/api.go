package dispatcher

import (
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/selection"
)

// API verbs every replica answers on reach.api.<verb> (no queue group, so a
// caller gathering replies hears from each replica).
const (
	APIStats    = "stats"
	APIBreakers = "breakers"
)

// BreakersReply is one replica's answer on reach.api.breakers.
type BreakersReply struct {
	Dispatcher string                    `json:"dispatcher"`
	Breakers   []selection.BreakerStatus `json:"breakers"`
}

// subscribeAPI answers the inspection verbs.
func (d *Dispatcher) subscribeAPI() ([]*nats.Subscription, error) {
	handlers := map[string]func() any{
		APIStats:    func() any { return d.Stats() },
		APIBreakers: func() any { return BreakersReply{Dispatcher: d.cfg.Name, Breakers: d.Breakers()} },
	}
	var subs []*nats.Subscription
	for verb, h := range handlers {
		sub, err := d.nc.Subscribe(d.cfg.Subjects.API(verb), func(m *nats.Msg) {
			b, err := json.Marshal(h())
			if err != nil {
				d.log.Error().Err(err).Str("verb", verb).Msg("api reply")
				return
			}
			if err := m.Respond(b); err != nil {
				d.log.Debug().Err(err).Str("verb", verb).Msg("api reply")
			}
		})
		if err != nil {
			for _, s := range subs {
				_ = s.Unsubscribe()
			}
			return nil, err
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// Breakers returns the breaker of every instance this replica has routed to,
// sorted by instance id.
func (d *Dispatcher) Breakers() []selection.BreakerStatus { return d.eng.Breakers() }
