package routing

import (
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

// startResponders starts the direct baseline's queue-group echo responders.
func startResponders(e *harness.Env, hdr nats.Header) error {
	for i := range harness.OverheadAgents {
		if err := listen(e, fmt.Sprintf("direct-%d", i), func(nc *nats.Conn) (*nats.Subscription, error) {
			return nc.QueueSubscribe(directSubject, "q", func(m *nats.Msg) {
				_ = nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: m.Data, Header: hdr})
			})
		}); err != nil {
			return err
		}
	}
	return nil
}

// listen opens a connection named name and subscribes on it with
// subscribe, without pending limits, flushed so the server has the interest
// before it returns.
func listen(e *harness.Env, name string, subscribe func(nc *nats.Conn) (*nats.Subscription, error)) error {
	nc, err := e.Connect(name)
	if err != nil {
		return err
	}
	sub, err := subscribe(nc)
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush()
	}
	return err
}

// startProtoAgents starts overheadAgents minimal agents on subjects
// reach.agent.proto-<i>: each answers a delivery as agentkit answers one
// that offers Reach-Reply-To — the echoed payload with a FINISHED result's
// headers to the caller, then a bodiless Reach-Direct notice to the
// delivery's reply subject — and does nothing else.
func startProtoAgents(e *harness.Env) error {
	for i := range harness.OverheadAgents {
		id := fmt.Sprintf("proto-%d", i)
		if err := listen(e, id, func(nc *nats.Conn) (*nats.Subscription, error) {
			return nc.Subscribe(streams.Subjects{}.Agent(id), func(m *nats.Msg) { _ = harness.ProtoAnswer(nc, m, id) })
		}); err != nil {
			return err
		}
	}
	return nil
}

// relay is a bare relay: a queue-group subscriber on listen that forwards
// each request to the subject to() names (with the headers set() adds, if
// any), doing nothing else — no routing decision, no state but the map from
// its own reply subjects to the callers'. The answer comes back through it,
// or, when direct, goes from the worker to the caller. In front of the
// direct responders it is the floor of any design that puts a hop between
// caller and worker; in front of the echo agents, the floor of the
// dispatcher.
type relay struct {
	listen string
	to     func() string
	set    func(h nats.Header, token string)
	// direct hands the worker the caller's reply subject as its own: the
	// answer never comes back through the relay.
	direct bool
	// offer passes the caller's reply subject in Reach-Reply-To, as the
	// dispatcher does: an agent answers the caller itself and the relay
	// drops its Reach-Direct notice.
	offer bool
}

func startRelay(e *harness.Env, rl relay) error {
	name := "relay-" + rl.listen
	if rl.direct {
		return listen(e, name, func(nc *nats.Conn) (*nats.Subscription, error) {
			return nc.QueueSubscribe(rl.listen, "relay", func(m *nats.Msg) {
				_ = nc.PublishMsg(&nats.Msg{Subject: rl.to(), Reply: m.Reply, Data: m.Data, Header: m.Header})
			})
		})
	}
	nc, err := e.Connect(name)
	if err != nil {
		return err
	}
	prefix := nc.NewRespInbox() + "."
	var mu sync.Mutex
	pending := map[string]string{}
	back, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		token := m.Subject[len(prefix):]
		mu.Lock()
		to, ok := pending[token]
		delete(pending, token)
		mu.Unlock()
		if ok && m.Header.Get(streams.HeaderDirect) == "" {
			_ = nc.PublishMsg(&nats.Msg{Subject: to, Data: m.Data, Header: m.Header})
		}
	})
	if err != nil {
		return err
	}
	fwd, err := nc.QueueSubscribe(rl.listen, "relay", func(m *nats.Msg) {
		token := nuid.Next()
		mu.Lock()
		pending[token] = m.Reply
		mu.Unlock()
		if rl.set != nil {
			rl.set(m.Header, token)
		}
		if rl.offer {
			m.Header.Set(streams.HeaderReplyTo, m.Reply)
		}
		_ = nc.PublishMsg(&nats.Msg{Subject: rl.to(), Reply: prefix + token, Data: m.Data, Header: m.Header})
	})
	for _, s := range []*nats.Subscription{back, fwd} {
		if err == nil {
			err = s.SetPendingLimits(-1, -1)
		}
	}
	if err == nil {
		err = nc.Flush()
	}
	return err
}
