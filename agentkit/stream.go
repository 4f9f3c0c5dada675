package agentkit

import (
	"context"
	"errors"
	"iter"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit/internal/requester"
	"github.com/agent-reach/agentreach/streams"
)

// Streaming results (docs/protocol.md, Streaming results).

// ErrStreamEnded is Send's error once the task's final reply has gone out:
// a chunk after it would be dropped.
var ErrStreamEnded = errors.New("agentkit: the task has answered; no chunk may follow")

// Streaming reports whether the caller asked for the task's chunks
// (Reach-Stream: 1 on the delivery). Send does nothing when it did not.
func (r *Request) Streaming() bool { return r.Header.Get(streams.HeaderStream) == "1" }

// Send streams one piece of the result to the caller, as the next CHUNK
// (Reach-Seq 1, 2, …), encoded like the result ([]byte as is). The
// handler's return value is still the whole result: callers that did not
// ask for a stream, durable callers and replays get it alone. Send does
// nothing (and returns nil) when the caller did not ask for a stream, and
// returns ErrStreamEnded once the result has been sent. Calls must not
// overlap: chunks are numbered in the order Send is called.
func (r *Request) Send(ctx context.Context, chunk any) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case !r.Streaming():
		return nil
	case r.final.Load():
		return ErrStreamEnded
	}
	data, ok := chunk.([]byte)
	if !ok {
		var err error
		if data, err = streams.Encode(r.ContentType, chunk); err != nil {
			return err
		}
	}
	r.agent.ack(r)      // ACKED comes before the first chunk
	if r.chunk == nil { // one message serves every chunk: calls do not overlap, and a publish copies it out
		r.chunk = streams.StatusReply(r.reply, streams.StatusChunk, r.RequestID)
		r.chunk.Header[streams.HeaderSeq], r.chunk.Header[streams.HeaderContentType] = []string{""}, []string{""}
	}
	m, h := r.chunk, r.chunk.Header
	h[streams.HeaderSeq][0], h[streams.HeaderContentType][0], m.Data = strconv.FormatInt(r.chunks.Load()+1, 10), r.ContentType, data
	err := streams.CheckSize(m, r.agent.nc.MaxPayload())
	if err == nil {
		if err = r.agent.nc.PublishMsg(m); err == nil {
			r.chunks.Add(1)
		}
	}
	return err
}

// stampChunks marks r answered and puts Reach-Chunks on its final result
// when it streamed.
func (r *Request) stampChunks(m *nats.Msg) {
	r.final.Store(true)
	if n := r.chunks.Load(); n > 0 && m.Header.Get(streams.HeaderError) == "" {
		m.Header.Set(streams.HeaderChunks, strconv.FormatInt(n, 10))
	}
}

// Stream calls a capability asking for its result as a stream
// (Reach-Stream: 1). It yields each chunk as a Result with Status CHUNK
// (Data the piece, Header its Reach-Seq and Reach-Node), then the final
// Result (FINISHED, the whole result, Reach-Chunks) — or an error, after
// which nothing follows. An agent that does not stream yields the final
// result alone. Stopping the loop early, or ctx ending, cancels the task
// (reach.cancel). ctx without a deadline gets DefaultCallTimeout.
func (c *Client) Stream(ctx context.Context, capability string, payload any, opts ...CallOption) iter.Seq2[*Result, error] {
	return func(yield func(*Result, error) bool) {
		ctx, cancel := bounded(ctx)
		defer cancel()
		opts = append(opts, WithHeader(streams.HeaderStream, "1"))
		m, err := c.message(ctx, c.subjects.Task(capability), capability, payload, false, opts)
		if err != nil {
			yield(nil, err)
			return
		}
		if err := streams.CheckSize(m, c.nc.MaxPayload()); err != nil {
			yield(nil, err)
			return
		}
		id := m.Header.Get(streams.HeaderRequestID)
		m.Reply = c.nc.NewRespInbox()
		sub, err := c.nc.SubscribeSync(m.Reply)
		if err != nil {
			yield(nil, err)
			return
		}
		defer func() { _ = sub.Unsubscribe() }()
		ctx, stop := c.requests.Guard(ctx, m.Subject)
		defer stop()
		if err := c.nc.PublishMsg(m); err != nil {
			yield(nil, err)
			return
		}
		for {
			reply, err := sub.NextMsgWithContext(ctx)
			if refused := requester.Refused(ctx, "stream of "+capability); err != nil && refused != nil {
				yield(nil, refused) // it never reached a dispatcher: nothing to cancel
				return
			}
			if err != nil {
				c.cancel(id) // nobody reads the stream now
				code := streams.CodeCancelled
				if errors.Is(err, context.DeadlineExceeded) {
					code = streams.CodeDeadlineExceeded
				}
				yield(nil, streams.NewError(code, "stream of %s: %v", capability, err))
				return
			}
			if reply.Header.Get("Status") == "503" {
				yield(nil, streams.NewError(streams.CodeNoAgent, "no dispatcher is listening on %s", m.Subject))
				return
			}
			res, err := outcome(reply)
			if res.Status == streams.StatusChunk {
				if !yield(res, nil) {
					c.cancel(id) // the caller stopped reading
					return
				}
				continue
			}
			if err == nil && res.Node != "" {
				c.recent.add(res.RequestID, res.Node)
			}
			yield(res, err)
			return
		}
	}
}
