package dispatcher

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/agent-reach/agentreach/streams"
)

// inbox multiplexes every delivery's replies (ACKED, PROCESSING, the result)
// over wildcard subscriptions, routing them by the reply subject's last two
// tokens: a shard, which picks the subscription (and so the goroutine),
// and a unique id. Replies to one delivery all take its shard's goroutine,
// in order. The subscriptions are plain ones, not a queue group: the
// server answers "no responders" only to a plain subscription.
type inbox struct {
	prefix string
	subs   []*nats.Subscription
	next   atomic.Uint64

	onReply func(*delivery, *nats.Msg)

	mu      sync.Mutex
	waiters map[string]*delivery
	late    atomic.Int64 // CHUNK messages to deliveries that had ended
}

// newInbox subscribes to the inbox with n shards; onReply runs on a
// shard's goroutine for every reply to an open delivery.
func newInbox(nc *nats.Conn, n int, onReply func(*delivery, *nats.Msg)) (*inbox, error) {
	ib := &inbox{prefix: nc.NewRespInbox() + ".", onReply: onReply, waiters: make(map[string]*delivery)}
	subs, err := subscribeEach(n, 256<<20, func(i int) (*nats.Subscription, error) {
		return nc.Subscribe(ib.prefix+strconv.Itoa(i)+".*", ib.route)
	})
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
	switch {
	case dl != nil:
		ib.onReply(dl, m)
	case m.Header.Get(streams.HeaderStatus) == string(streams.StatusChunk):
		ib.late.Add(1) // a chunk after its delivery ended
	} // else a late reply to a finished delivery
}

// open registers dl under a new reply subject, on the next shard, and
// returns the subject.
func (ib *inbox) open(dl *delivery) string {
	shard := ib.next.Add(1) % uint64(len(ib.subs))
	dl.token = strconv.FormatUint(shard, 10) + "." + nuid.Next()
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

// all returns every open delivery.
func (ib *inbox) all() []*delivery {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	out := make([]*delivery, 0, len(ib.waiters))
	for _, dl := range ib.waiters {
		out = append(out, dl)
	}
	return out
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
