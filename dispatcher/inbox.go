package dispatcher

import (
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// inbox multiplexes every delivery's replies (ACKED, PROCESSING, the result)
// over one wildcard subscription, routing them by the reply subject's last
// token.
type inbox struct {
	prefix string
	sub    *nats.Subscription

	mu      sync.Mutex
	waiters map[string]chan *nats.Msg
}

// replyBuffer holds replies not yet read by a task: an ACK, a few progress
// messages and the result fit; surplus progress messages are dropped.
const replyBuffer = 8

func newInbox(nc *nats.Conn) (*inbox, error) {
	ib := &inbox{prefix: nc.NewRespInbox() + ".", waiters: make(map[string]chan *nats.Msg)}
	sub, err := nc.Subscribe(ib.prefix+"*", ib.route)
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, 256<<20); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	ib.sub = sub
	return ib, nil
}

func (ib *inbox) route(m *nats.Msg) {
	token := m.Subject[len(ib.prefix):]
	ib.mu.Lock()
	ch := ib.waiters[token]
	ib.mu.Unlock()
	if ch == nil {
		return // a late reply to a finished attempt
	}
	select {
	case ch <- m:
	default:
	}
}

// open registers a new reply subject and returns it with its channel.
func (ib *inbox) open() (string, chan *nats.Msg) {
	token := nuid.Next()
	ch := make(chan *nats.Msg, replyBuffer)
	ib.mu.Lock()
	ib.waiters[token] = ch
	ib.mu.Unlock()
	return ib.prefix + token, ch
}

// close forgets a reply subject.
func (ib *inbox) close(subject string) {
	ib.mu.Lock()
	delete(ib.waiters, subject[len(ib.prefix):])
	ib.mu.Unlock()
}

func (ib *inbox) stop() error { return ib.sub.Unsubscribe() }
