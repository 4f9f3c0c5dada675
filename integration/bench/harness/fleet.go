package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// fleetBuffer is how many deliveries one fleet connection holds before its
// workers take them; a full buffer makes the client drop (a slow consumer),
// which the fleet reports.
const fleetBuffer = 1 << 16

// Fleet is many agent instances answering in the protocol, multiplexed:
// each instance subscribes to its own reach.agent.<id> as an agent does,
// the subscriptions spread over a few connections, each connection's
// deliveries on one channel that a few goroutines answer. It is what
// thousands of agents look like to the dispatcher and the server, at the
// cost of a few connections. Instances answer at once: the result to the
// caller when the delivery offers Reach-Reply-To (with the notice to the
// dispatcher), else to the dispatcher; a CANCEL is ignored, which is
// always correct.
//
// With also, every connection also subscribes to that plain NATS subject
// once per instance and echoes each message to its reply subject: the
// baseline of a scatter-gather to the same subscribers.
type Fleet struct {
	served  atomic.Int64
	plain   atomic.Int64
	Dropped atomic.Int64

	ByID map[string]*atomic.Int64 // answered deliveries per instance; read-only once started

	conns []*nats.Conn
	chans []chan *nats.Msg
	wg    sync.WaitGroup
	once  sync.Once
}

// StartFleet subscribes every id over conns connections (workers answering
// goroutines each); also, when not empty, is the plain subject each
// instance also listens on. Its goroutines carry the agents label.
func (r *Run) StartFleet(e *Env, name string, ids []string, conns, workers int, also string) (fl *Fleet, err error) {
	Labelled(r.Ctx, CompAgents, func(context.Context) { fl, err = newFleet(e, name, ids, conns, workers, also) })
	return fl, err
}

func newFleet(e *Env, name string, ids []string, conns, workers int, also string) (*Fleet, error) {
	fl := &Fleet{ByID: make(map[string]*atomic.Int64, len(ids))}
	for _, id := range ids {
		fl.ByID[id] = new(atomic.Int64)
	}
	agentPrefix := streams.Subjects{}.Agent("")
	for c := range conns {
		nc, err := e.Connect(fmt.Sprintf("%s-%d", name, c), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {
			fl.Dropped.Add(1)
		}))
		if err != nil {
			fl.Stop()
			return nil, err
		}
		ch := make(chan *nats.Msg, fleetBuffer)
		fl.conns, fl.chans = append(fl.conns, nc), append(fl.chans, ch)
		for k := c; k < len(ids); k += conns {
			if _, err := nc.ChanSubscribe(agentPrefix+ids[k], ch); err != nil {
				fl.Stop()
				return nil, err
			}
			if also != "" {
				if _, err := nc.ChanSubscribe(also, ch); err != nil {
					fl.Stop()
					return nil, err
				}
			}
		}
		if err := nc.Flush(); err != nil {
			fl.Stop()
			return nil, err
		}
		for range workers {
			fl.wg.Add(1)
			go func() {
				defer fl.wg.Done()
				for m := range ch {
					fl.answer(nc, m, agentPrefix)
				}
			}()
		}
	}
	return fl, nil
}

func (fl *Fleet) answer(nc *nats.Conn, m *nats.Msg, agentPrefix string) {
	if m.Reply == "" {
		return // a CANCEL: ignoring it is always correct
	}
	id, ok := strings.CutPrefix(m.Subject, agentPrefix)
	if !ok {
		if nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: m.Data}) == nil {
			fl.plain.Add(1)
		}
		return
	}
	if ProtoAnswer(nc, m, id) == nil {
		fl.served.Add(1)
		if n := fl.ByID[id]; n != nil {
			n.Add(1)
		}
	}
}

// used returns how many instances answered at least one delivery.
func (fl *Fleet) used() int {
	n := 0
	for _, c := range fl.ByID {
		if c.Load() > 0 {
			n++
		}
	}
	return n
}

// Stop closes the connections and waits for the workers; calling it again
// does nothing.
func (fl *Fleet) Stop() {
	fl.once.Do(func() {
		for _, nc := range fl.conns {
			nc.Close()
		}
		for _, ch := range fl.chans {
			close(ch)
		}
		fl.wg.Wait()
	})
}

// ProtoAnswer answers delivery m as agentkit answers a task that finished
// at once, as instance id, echoing the payload: offered Reach-Reply-To, the
// result with the headers a dispatcher would add goes to the caller and a
// bodiless Reach-Direct notice to the delivery's reply subject; otherwise
// the result goes to the reply subject.
func ProtoAnswer(nc *nats.Conn, m *nats.Msg, id string) error {
	rid := m.Header.Get(streams.HeaderRequestID)
	to := m.Header.Get(streams.HeaderReplyTo)
	dest := m.Reply
	if to != "" {
		dest = to
	}
	res := streams.StatusReply(dest, streams.StatusFinished, rid)
	res.Data = m.Data
	res.Header.Set(streams.HeaderContentType, streams.ContentType(m.Header, m.Data))
	res.Header.Set(streams.HeaderNode, id)
	if to == "" {
		res.Header.Set(streams.HeaderActive, "0")
		return nc.PublishMsg(res)
	}
	orch, attempt := m.Header.Get(streams.HeaderOrchestrationID), m.Header.Get(streams.HeaderAttempt)
	if orch == "" {
		orch = rid
	}
	if attempt == "" {
		attempt = "1"
	}
	res.Header.Set(streams.HeaderOrchestrationID, orch)
	res.Header.Set(streams.HeaderAttempt, attempt)
	notice := streams.StatusReply(m.Reply, streams.StatusFinished, "")
	notice.Header.Set(streams.HeaderDirect, "1")
	notice.Header.Set(streams.HeaderActive, "0")
	if err := nc.PublishMsg(res); err != nil {
		return err
	}
	return nc.PublishMsg(notice)
}
