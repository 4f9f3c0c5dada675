package dispatcher

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Stream is Call for a caller that takes the agent's chunks as they come
// (docs/protocol.md, Streaming results): each gets every CHUNK relayed, in
// order, with Reach-Seq, Reach-Node and the caller's request id, on the
// stream's own goroutine; Stream returns the final reply — the result with
// Reach-Chunks, or an error reply. The rules are a streamed task's from
// NATS: retries and hedging until the first chunk, pinned after it. each
// may block while its reader is slow: up to Config.StreamBuffer chunks
// wait, past that the stream ends OVERLOADED. each must return once ctx
// has ended; when ctx ends first the task is cancelled, its instance gets
// a CANCEL, and Stream returns CANCELLED (or DEADLINE_EXCEEDED). A name a
// workflow serves is called, not streamed.
func (d *Dispatcher) Stream(ctx context.Context, capability string, req *nats.Msg, each func(chunk *nats.Msg)) *nats.Msg {
	start := time.Now()
	if req.Header == nil {
		req.Header = nats.Header{}
	}
	if d.Table() == nil {
		return refusal(req, streams.NewError(streams.CodeInternal, "dispatcher %s is not started", d.cfg.Name))
	}
	if d.Resolves(capability) {
		return d.Call(ctx, capability, req)
	}
	caller := callerOf(req.Header)
	if e := d.admit(caller); e != nil {
		return refusal(req, e)
	}
	req.Reply = ""
	req.Header.Set(streams.HeaderStream, "1")
	t, e := d.newTask(req, capability, start, false)
	if dl, ok := ctx.Deadline(); ok && e == nil && dl.Before(t.deadline) {
		t.deadline = dl
	}
	out := make(chan *nats.Msg, 1)
	t.start = start
	d.startRelay(t, func(m *nats.Msg) {
		if m.Header.Get(streams.HeaderStatus) == string(streams.StatusChunk) {
			each(m)
			return
		}
		out <- m
	}, false)
	t.done = func(t *task, res *nats.Msg, e *streams.Error) {
		reply, _ := d.conclude(t, res, e)
		d.free(caller)
		d.finishRelay(t, reply, d.tasks.Done)
	}
	if e != nil {
		t.done(t, nil, e)
		return <-out
	}
	d.run(t)
	select {
	case reply := <-out:
		return reply
	case <-ctx.Done():
		d.cancel(t, callerGone(ctx))
		return <-out
	}
}
