package dispatcher

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/relay"
	"github.com/agent-reach/agentreach/streams"
)

// Streaming results (docs/protocol.md, Streaming results), part of
// deliver and settle. A caller that sends Reach-Stream: 1 on the direct
// tier gets the agent's CHUNK messages relayed, in order, on its reply
// subject, then the final result (with Reach-Chunks) or an error (without).
//
// Until the first chunk is relayed a streamed task is like any other:
// retried, hedged. The first chunk pins it to the delivery that sent it:
// its other deliveries (a hedge) are cancelled and their chunks dropped,
// and no retry or hedge follows — a failure of the pinned delivery, or its
// silence for the ack timeout between messages, ends the stream with the
// error. A Reach-Seq out of order ends it INTERNAL.
//
// A caller in process (Stream, and so the HTTP gateway) reads the chunks
// through a bounded per-stream queue (dispatcher/relay; Config.StreamBuffer,
// default DefaultStreamBuffer); past the bound the task ends OVERLOADED
// (its instance gets a CANCEL), so memory per stream is bounded by
// StreamBuffer chunks of at most the server's max payload. A caller over
// NATS gets each chunk published as it comes, on the inbox's goroutine:
// the connection buffers and flushes, and a caller that reads too slowly
// is the server's slow consumer, as for any message.
//
// Chunks for a caller that did not ask, for a delivery that is not the
// pinned one, for a delivery that has ended, or naming another request id
// are dropped and counted (Stats.ChunksDropped); a task that is not
// relayed (no Reach-Stream, the durable tier, a fan-out's branch) ends with
// its one final result as before.

// DefaultStreamBuffer is how many chunks a stream holds for a slow caller
// before it ends OVERLOADED (Config.StreamBuffer).
const DefaultStreamBuffer = 256

// stream is a streamed task's state; t.mu guards it.
type stream struct {
	out   *relay.Relay
	dl    *delivery // the delivery the stream is pinned to, once a chunk came
	first time.Time // when the first chunk was relayed
}

// streamed reports whether a task's chunks are relayed to its caller: a
// direct-tier task whose caller sent Reach-Stream: 1 and waits for a reply.
func streamed(h nats.Header, reply string, durable bool) bool {
	return !durable && reply != "" && h.Get(streams.HeaderStream) == "1"
}

// startRelay makes t a streamed task whose messages go to sink, through a
// bounded queue; with inline, a sink that never waits (a NATS publish)
// takes them at once.
func (d *Dispatcher) startRelay(t *task, sink func(*nats.Msg), inline bool) {
	if inline {
		t.relay = &stream{out: relay.Inline(sink)}
		return
	}
	t.relay = &stream{out: relay.New(d.cfg.StreamBuffer, sink)}
}

// onChunk handles one CHUNK reply to dl, on the inbox's goroutine.
func (d *Dispatcher) onChunk(dl *delivery, m *nats.Msg) {
	t := dl.t
	if id := m.Header.Get(streams.HeaderRequestID); id != "" && id != t.requestID {
		d.stats.chunksDropped.Add(1)
		return
	}
	// A chunk is progress: like PROCESSING it shows the agent alive. Once
	// the stream runs, the agent must not fall silent longer than the ack
	// timeout between two messages.
	dl.mu.Lock()
	if dl.over {
		dl.mu.Unlock()
		d.stats.chunksDropped.Add(1)
		return
	}
	// The timer is not reset for every chunk (that costs more than the
	// rest of a chunk's relay): expires moves on, and the timer, when it
	// fires early, re-arms itself for the rest (expire).
	now := time.Now()
	wait := t.pol.ackTimeout
	if t.relay == nil {
		wait = t.pol.callTimeout(t.wish, d.hints.TimeoutHint(dl.inst.Entry()))
	}
	dl.expires = now.Add(min(wait, t.deadline.Sub(now)))
	if !dl.acked || dl.chunks == 0 {
		dl.timer.Reset(dl.expires.Sub(now))
	}
	dl.acked = true
	dl.chunks++
	n := dl.chunks
	dl.mu.Unlock()
	if t.relay == nil { // the caller did not ask for the stream
		d.stats.chunksDropped.Add(1)
		return
	}
	t.mu.Lock()
	s := t.relay
	switch {
	case t.ended, s.dl != nil && s.dl != dl: // over, or a hedge's loser
		t.mu.Unlock()
		d.stats.chunksDropped.Add(1)
		return
	case s.dl == nil:
		s.dl, s.first = dl, time.Now()
		var losers []*delivery
		for _, o := range t.open {
			if o != dl {
				losers = append(losers, o)
			}
		}
		t.mu.Unlock()
		t.log.Debug().Str("node", dl.inst.ID).Msg("stream pinned")
		for _, o := range losers {
			d.cancelDelivery(o, streams.NewError(streams.CodeCancelled, "another delivery of the task streamed first"))
		}
		t.mu.Lock()
	}
	if err := relay.CheckSeq(m.Header, n); err != nil {
		t.mu.Unlock()
		d.end(dl, nil, nil, streams.NewError(streams.CodeInternal, "instance %s: %v", dl.inst.ID, err), outcomeFinal)
		return
	}
	ct := m.Header.Get(streams.HeaderContentType)
	if ct == "" {
		ct = t.contentType
	}
	out := relay.Chunk(t.req.Reply, t.requestID, t.orchID, dl.inst.ID, n, ct, m.Data)
	if err := streams.CheckSize(out, d.nc.MaxPayload()); err != nil {
		t.mu.Unlock()
		d.end(dl, nil, nil, streams.NewError(streams.CodePayloadTooLarge, "chunk %d of %s: %v", n, dl.inst.ID, err), outcomeFinal)
		return
	}
	// Pushed under t.mu, which settle takes to end the task: no chunk can
	// follow the final message.
	err := s.out.Push(out)
	t.mu.Unlock()
	if err != nil {
		d.stats.streamsOverloaded.Add(1)
		d.cancel(t, streams.NewError(streams.CodeOverloaded, "the caller did not read the stream: %d chunks waiting", d.cfg.StreamBuffer))
		return
	}
	d.stats.chunksRelayed.Add(1)
}

// finishRelay sends the final message of t's stream after its chunks;
// done runs once it is sent.
func (d *Dispatcher) finishRelay(t *task, out *nats.Msg, done func()) {
	if out != nil {
		out.Subject = t.req.Reply
	}
	t.relay.out.Finish(out, done)
}

// publishToCaller is the sink of a streamed task from NATS: its caller's
// reply subject.
func (d *Dispatcher) publishToCaller(t *task) func(*nats.Msg) {
	return func(m *nats.Msg) {
		if err := d.nc.PublishMsg(m); err != nil {
			t.log.Warn().Err(err).Str("status", m.Header.Get(streams.HeaderStatus)).Msg("stream message to caller failed")
		}
	}
}

// checkChunks reports whether a final result's Reach-Chunks agrees with
// the chunks its delivery sent.
func checkChunks(dl *delivery, res *nats.Msg) *streams.Error {
	dl.mu.Lock()
	n := dl.chunks
	dl.mu.Unlock()
	if err := relay.CheckCount(res.Header, n); err != nil {
		return streams.NewError(streams.CodeInternal, "instance %s ended its stream: %v", dl.inst.ID, err)
	}
	return nil
}
