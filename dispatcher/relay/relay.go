package relay

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// ErrFull is Push's error when the caller has not taken the chunks
// already waiting.
var ErrFull = errors.New("relay: the caller's chunks fill the buffer")

// Relay is one stream's way to its caller. Push and Finish must not be
// called concurrently (the dispatcher serializes them under its task's
// lock); Sent may be read after Finish.
type Relay struct {
	q     chan *nats.Msg // limit chunks and the final message
	limit int
	sink  func(*nats.Msg)
	sent  int
	wg    sync.WaitGroup
}

// New starts a relay holding at most limit chunks (at least 1) for sink,
// which gets every message in order on the relay's own goroutine and may
// block while its caller is slow.
func New(limit int, sink func(*nats.Msg)) *Relay {
	r := &Relay{q: make(chan *nats.Msg, max(limit, 1)+1), limit: max(limit, 1), sink: sink}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for m := range r.q {
			r.sink(m)
		}
	}()
	return r
}

// Inline returns a relay without a queue: each message goes to sink on the
// goroutine that pushes it, for a sink that never waits for its reader (a
// publish on a NATS connection, which buffers and flushes on its own).
func Inline(sink func(*nats.Msg)) *Relay { return &Relay{sink: sink} }

// Push queues a chunk, or returns ErrFull when limit chunks wait.
func (r *Relay) Push(chunk *nats.Msg) error {
	if r.q == nil {
		r.sink(chunk)
		r.sent++
		return nil
	}
	if len(r.q) >= r.limit {
		return ErrFull
	}
	r.q <- chunk
	r.sent++
	return nil
}

// Sent is how many chunks were queued.
func (r *Relay) Sent() int { return r.sent }

// Finish queues the final message (nil: none) after the chunks: a result
// gets Reach-Chunks, the count of chunks sent; an error reply (Reach-Error)
// has none. Once the relay's goroutine has handed it to the sink, done
// runs (on a goroutine of its own; an Inline relay runs it at once).
func (r *Relay) Finish(final *nats.Msg, done func()) {
	if final != nil {
		if final.Header.Get(streams.HeaderError) == "" {
			final.Header.Set(streams.HeaderChunks, strconv.Itoa(r.sent))
		} else {
			final.Header.Del(streams.HeaderChunks)
		}
		if r.q == nil {
			r.sink(final)
		} else {
			r.q <- final // the one slot beyond the bound is the final message's
		}
	}
	if r.q == nil {
		done()
		return
	}
	close(r.q)
	go func() {
		r.wg.Wait()
		done()
	}()
}

// Chunk builds the caller's copy of chunk seq of a stream: CHUNK with the
// caller's request and orchestration ids, the instance (Reach-Node) and
// Reach-Seq, the agent's body in contentType.
func Chunk(subject, requestID, orchID, node string, seq int, contentType string, data []byte) *nats.Msg {
	// The header names are canonical already: no Set, which would
	// canonicalize each of them for every chunk.
	h := nats.Header{
		streams.HeaderStatus:      {string(streams.StatusChunk)},
		streams.HeaderRequestID:   {requestID},
		streams.HeaderNode:        {node},
		streams.HeaderSeq:         {strconv.Itoa(seq)},
		streams.HeaderContentType: {contentType},
	}
	if orchID != "" {
		h[streams.HeaderOrchestrationID] = []string{orchID}
	}
	return &nats.Msg{Subject: subject, Data: data, Header: h}
}

// CheckSeq reports whether an agent's chunk carries Reach-Seq want (the
// next in order); a gap or a malformed number is an INTERNAL error.
func CheckSeq(h nats.Header, want int) error {
	v := h.Get(streams.HeaderSeq)
	if n, err := strconv.ParseUint(v, 10, 31); err != nil || int(n) != want {
		return fmt.Errorf("chunk %s %q where %d was due", streams.HeaderSeq, v, want)
	}
	return nil
}

// CheckCount reports whether a final message's Reach-Chunks, when it has
// one, agrees with the n chunks that came before it: a stream that lost
// its tail has a gap too.
func CheckCount(h nats.Header, n int) error {
	v := h.Get(streams.HeaderChunks)
	if v == "" {
		return nil
	}
	if c, err := strconv.ParseUint(v, 10, 31); err != nil || int(c) != n {
		return fmt.Errorf("%s %q after %d chunks", streams.HeaderChunks, v, n)
	}
	return nil
}
