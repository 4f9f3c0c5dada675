package inbox

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/agent-reach/agentreach/internal/subscription"
	"github.com/agent-reach/agentreach/streams"
)

// pendingBytes is how much of the replies may wait for one shard's
// goroutine.
const pendingBytes = 256 << 20

// Inbox multiplexes every delivery's replies (ACKED, PROCESSING, the
// result) over wildcard subscriptions, routing them by the reply subject's
// last two tokens: a shard, which picks the subscription (and so the
// goroutine), and a unique token. Replies to one delivery all take its
// shard's goroutine, in order. The subscriptions are plain ones, not a
// queue group: the server answers "no responders" only to a plain
// subscription. D is the delivery; its methods are safe for concurrent use.
type Inbox[D any] struct {
	prefix string
	subs   []*nats.Subscription
	next   atomic.Uint64

	onReply func(D, *nats.Msg)

	mu      sync.Mutex
	waiters map[string]D
	late    atomic.Int64 // CHUNK messages to deliveries that had ended
}

// New subscribes to an inbox of nc with n shards; onReply runs on a
// shard's goroutine for every reply to an open delivery.
func New[D any](nc *nats.Conn, n int, onReply func(D, *nats.Msg)) (*Inbox[D], error) {
	ib := &Inbox[D]{prefix: nc.NewRespInbox() + ".", onReply: onReply, waiters: make(map[string]D)}
	subs, err := subscription.Each(n, pendingBytes, func(i int) (*nats.Subscription, error) {
		return nc.Subscribe(ib.prefix+strconv.Itoa(i)+".*", ib.route)
	})
	if err != nil {
		return nil, err
	}
	ib.subs = subs
	return ib, nil
}

func (ib *Inbox[D]) route(m *nats.Msg) {
	token := m.Subject[len(ib.prefix):]
	ib.mu.Lock()
	d, ok := ib.waiters[token]
	ib.mu.Unlock()
	switch {
	case ok:
		ib.onReply(d, m)
	case m.Header.Get(streams.HeaderStatus) == string(streams.StatusChunk):
		ib.late.Add(1) // a chunk after its delivery ended
	} // else a late reply to a finished delivery
}

// Token returns a new delivery's token, on the next shard: the last two
// tokens of its reply subject.
func (ib *Inbox[D]) Token() string {
	shard := ib.next.Add(1) % uint64(len(ib.subs))
	return strconv.FormatUint(shard, 10) + "." + nuid.Next()
}

// Open registers d under token (Token) and returns its reply subject;
// Close forgets it.
func (ib *Inbox[D]) Open(token string, d D) string {
	ib.mu.Lock()
	ib.waiters[token] = d
	ib.mu.Unlock()
	return ib.prefix + token
}

// Subject is the reply subject of token.
func (ib *Inbox[D]) Subject(token string) string { return ib.prefix + token }

// Close forgets a delivery's reply subject.
func (ib *Inbox[D]) Close(token string) {
	ib.mu.Lock()
	delete(ib.waiters, token)
	ib.mu.Unlock()
}

// All returns every open delivery.
func (ib *Inbox[D]) All() []D {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	out := make([]D, 0, len(ib.waiters))
	for _, d := range ib.waiters {
		out = append(out, d)
	}
	return out
}

// Late counts the CHUNK messages that came after their delivery ended.
func (ib *Inbox[D]) Late() int64 { return ib.late.Load() }

// Stop ends the subscriptions; a closed connection has ended them already.
func (ib *Inbox[D]) Stop() error { return subscription.EndAll(ib.subs) }
