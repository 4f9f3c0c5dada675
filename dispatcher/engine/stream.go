package engine

import (
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/relay"
	"github.com/agent-reach/agentreach/streams"
)

// The streaming stage, part of deliver and settle (docs/protocol.md,
// Streaming results): the rules are dispatcher/relay's package doc; this
// file feeds a streamed task's chunks to its relay.Stream. Chunks for a
// caller that did not ask, for a delivery that is not the pinned one, for a
// delivery that has ended, or naming another request id are dropped and
// counted (Stats.ChunksDropped); a task that is not relayed (no
// Reach-Stream, the durable tier, a fan-out's branch) ends with its one
// final result as before.

// stream is a streamed task's state; t.mu guards it.
type stream = relay.Stream[*delivery]

// pinned returns the delivery t's stream is pinned to; nil when t is not
// streamed or no chunk came yet. t.mu guards it.
func (t *Task) pinned() *delivery {
	if t.relay == nil {
		return nil
	}
	dl, _ := t.relay.Pinned()
	return dl
}

// StartRelay makes t a streamed task whose messages go to sink, through a
// bounded queue; with inline, a sink that never waits (a NATS publish)
// takes them at once.
func (en *Engine) StartRelay(t *Task, sink func(*nats.Msg), inline bool) {
	out := relay.Inline(sink)
	if !inline {
		out = relay.New(en.cfg.StreamBuffer, sink)
	}
	t.relay = relay.NewStream[*delivery](out)
}

// onChunk handles one CHUNK reply to dl, on the inbox's goroutine.
func (en *Engine) onChunk(dl *delivery, m *nats.Msg) {
	t := dl.t
	if id := m.Header.Get(streams.HeaderRequestID); id != "" && id != t.requestID {
		en.stats.chunksDropped.Add(1)
		return
	}
	// A chunk is progress: like PROCESSING it shows the agent alive. Once
	// the stream runs, the agent must not fall silent longer than the ack
	// timeout between two messages.
	dl.mu.Lock()
	if dl.over {
		dl.mu.Unlock()
		en.stats.chunksDropped.Add(1)
		return
	}
	// The timer is not reset for every chunk (that costs more than the
	// rest of a chunk's relay): expires moves on, and the timer, when it
	// fires early, re-arms itself for the rest (expire).
	now := time.Now()
	wait := t.pol.AckTimeout
	if t.relay == nil {
		wait = en.CallTimeout(t, dl.inst)
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
		en.stats.chunksDropped.Add(1)
		return
	}
	t.mu.Lock()
	first, ok := false, !t.ended
	if ok {
		first, ok = t.relay.Pin(dl)
	}
	if first { // the stream is pinned to dl: its other deliveries end
		losers := slices.DeleteFunc(slices.Clone(t.open), func(o *delivery) bool { return o == dl })
		t.mu.Unlock()
		t.log.Debug().Str("node", dl.inst.ID).Msg("stream pinned")
		for _, o := range losers {
			en.cancelDelivery(o, streams.NewError(streams.CodeCancelled, "another delivery of the task streamed first"))
		}
		t.mu.Lock()
		ok = !t.ended // a cancel may have ended it meanwhile
	}
	if !ok { // over, or a hedge's loser
		t.mu.Unlock()
		en.stats.chunksDropped.Add(1)
		return
	}
	// Relayed under t.mu, which settle takes to end the task: no chunk can
	// follow the final message.
	rt := relay.Route{Subject: t.req.Reply, RequestID: t.requestID, OrchID: t.orchID, Node: dl.inst.ID, ContentType: t.contentType}
	err := t.relay.Relay(rt, m.Header, m.Data, n, en.nc.MaxPayload())
	t.mu.Unlock()
	switch {
	case err == nil:
		en.stats.chunksRelayed.Add(1)
	case errors.Is(err, relay.ErrFull):
		en.stats.streamsOverloaded.Add(1)
		en.Cancel(t, streams.NewError(streams.CodeOverloaded, "the caller did not read the stream: %d chunks waiting", en.cfg.StreamBuffer))
	case errors.Is(err, relay.ErrTooLarge):
		en.end(dl, nil, nil, streams.NewError(streams.CodePayloadTooLarge, "chunk %d of %s: %v", n, dl.inst.ID, err), OutcomeFinal)
	default:
		en.end(dl, nil, nil, streams.NewError(streams.CodeInternal, "instance %s: %v", dl.inst.ID, err), OutcomeFinal)
	}
}

// FinishRelay sends the final message of t's stream after its chunks;
// done runs once it is sent.
func (en *Engine) FinishRelay(t *Task, out *nats.Msg, done func()) {
	if out != nil {
		out.Subject = t.req.Reply
	}
	t.relay.Finish(out, done)
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
