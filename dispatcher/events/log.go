package events

import (
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Log batches a replica's records into messages and hands each to its
// publish function: a batch goes out when it holds eventBatchMax records
// or eventBatchBytes, or eventFlush after its first record. Its methods are
// safe for concurrent use; Flush sends what waits.
type Log struct {
	publish func(*nats.Msg)
	mu      sync.Mutex
	pending map[string]*eventBatch
}

type eventBatch struct {
	buf []byte
	n   int
}

// NewLog returns a log that sends its messages with publish, which must
// not keep m.Data past its return (the buffer is used again).
func NewLog(publish func(m *nats.Msg)) *Log {
	return &Log{publish: publish, pending: make(map[string]*eventBatch)}
}

// Alone sends ev on subject at once, alone, with msgID as its message id
// (deduplicated across redeliveries).
func (l *Log) Alone(subject, msgID string, ev *Event) {
	m := nats.NewMsg(subject)
	m.Header.Set(streams.HeaderMsgID, msgID)
	m.Header.Set(HeaderEvents, "1")
	m.Data = Append(nil, ev)
	l.send(m)
}

// Add batches ev for subject.
func (l *Log) Add(subject string, ev *Event) {
	l.mu.Lock()
	b := l.pending[subject]
	if b == nil {
		b = &eventBatch{}
		l.pending[subject] = b
	}
	if b.buf == nil {
		b.buf = (*eventBufs.Get().(*[]byte))[:0]
	}
	b.buf = Append(b.buf, ev)
	b.n++
	var full *nats.Msg
	switch {
	case b.n >= eventBatchMax || len(b.buf) >= eventBatchBytes:
		full = takeBatch(subject, b)
	case b.n == 1:
		time.AfterFunc(eventFlush, func() { l.Flush(subject) })
	}
	l.mu.Unlock()
	if full != nil {
		l.send(full)
	}
}

// eventBufs holds batch buffers between batches: a batch's buffer is free
// again once its publish has copied it into the connection's buffer. A
// busy dispatcher would otherwise allocate a fresh 64 KB per 128 records;
// a subject with nothing pending holds none.
var eventBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, eventBatchBytes+4<<10)
	return &b
}}

// takeBatch empties b into a message; the log's lock is held.
func takeBatch(subject string, b *eventBatch) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(HeaderEvents, strconv.Itoa(b.n))
	m.Data = b.buf
	b.buf, b.n = nil, 0 // an idle subject holds no buffer
	return m
}

// Flush sends the records waiting for subject, or every subject's
// when subject is "".
func (l *Log) Flush(subject string) {
	var out []*nats.Msg
	l.mu.Lock()
	for s, b := range l.pending {
		if b.n > 0 && (subject == "" || s == subject) {
			out = append(out, takeBatch(s, b))
		}
	}
	l.mu.Unlock()
	for _, m := range out {
		l.send(m)
	}
}

func (l *Log) send(m *nats.Msg) {
	l.publish(m)
	if cap(m.Data) >= eventBatchBytes { // a batch's buffer, copied by the publish
		buf := m.Data[:0]
		eventBufs.Put(&buf)
	}
}
