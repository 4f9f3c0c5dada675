package dispatcher

import (
	"errors"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// inbox multiplexes every delivery's replies (ACKED, PROCESSING, the result)
// over wildcard subscriptions, routing them by the reply subject's last
// token. With several subscriptions (one queue group), replies to one
// delivery may be handled out of order; a delivery's claim makes that safe.
type inbox struct {
	prefix string
	subs   []*nats.Subscription

	onReply func(*delivery, *nats.Msg)

	mu      sync.Mutex
	waiters map[string]*delivery
}

// newInbox subscribes to the inbox with n subscriptions; onReply runs on a
// subscription's goroutine for every reply to an open delivery.
func newInbox(nc *nats.Conn, n int, onReply func(*delivery, *nats.Msg)) (*inbox, error) {
	ib := &inbox{prefix: nc.NewRespInbox() + ".", onReply: onReply, waiters: make(map[string]*delivery)}
	subs, err := subscribeN(nc, n, ib.prefix+"*", "inbox", 256<<20, ib.route)
	if err != nil {
		return nil, err
	}
	ib.subs = subs
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

func (ib *inbox) stop() error {
	var errs []error
	for _, sub := range ib.subs {
		errs = append(errs, sub.Unsubscribe())
	}
	return errors.Join(errs...)
}
