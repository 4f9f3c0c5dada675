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

	onReply func(*delivery, *nats.Msg)

	mu      sync.Mutex
	waiters map[string]*delivery
}

// newInbox subscribes to the inbox; onReply runs on the subscription's
// goroutine for every reply to an open delivery.
func newInbox(nc *nats.Conn, onReply func(*delivery, *nats.Msg)) (*inbox, error) {
	ib := &inbox{prefix: nc.NewRespInbox() + ".", onReply: onReply, waiters: make(map[string]*delivery)}
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
	dl := ib.waiters[token]
	ib.mu.Unlock()
	if dl != nil { // else a late reply to a finished delivery
		ib.onReply(dl, m)
	}
}

// open registers dl under a new reply subject, which it returns.
func (ib *inbox) open(dl *delivery) string {
	dl.token = nuid.Next()
	ib.mu.Lock()
	ib.waiters[dl.token] = dl
	ib.mu.Unlock()
	return ib.prefix + dl.token
}

// close forgets a delivery's reply subject.
func (ib *inbox) close(token string) {
	ib.mu.Lock()
	delete(ib.waiters, token)
	ib.mu.Unlock()
}

// to returns the open deliveries to an instance.
func (ib *inbox) to(id string) []*delivery {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	var out []*delivery
	for _, dl := range ib.waiters {
		if dl.inst.ID == id {
			out = append(out, dl)
		}
	}
	return out
}

func (ib *inbox) stop() error { return ib.sub.Unsubscribe() }
