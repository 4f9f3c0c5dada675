package dispatcher

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/engine"
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
		return engine.Refusal(req, streams.NewError(streams.CodeInternal, "dispatcher %s is not started", d.cfg.Name))
	}
	if d.Resolves(capability) {
		return d.Call(ctx, capability, req)
	}
	caller := engine.CallerOf(req.Header)
	if e := d.eng.Admit(caller); e != nil {
		return engine.Refusal(req, e)
	}
	req.Reply = ""
	req.Header.Set(streams.HeaderStream, "1")
	t, e := d.eng.NewTask(req, capability, start, false)
	if dl, ok := ctx.Deadline(); ok && e == nil && dl.Before(t.Deadline()) {
		t.SetDeadline(dl)
	}
	out := make(chan *nats.Msg, 1)
	d.eng.StartRelay(t, func(m *nats.Msg) {
		if m.Header.Get(streams.HeaderStatus) == string(streams.StatusChunk) {
			each(m)
			return
		}
		out <- m
	}, false)
	done := func(t *engine.Task, res *nats.Msg, e *streams.Error) {
		reply, _ := d.eng.Conclude(t, res, e)
		d.eng.Free(caller)
		d.eng.FinishRelay(t, reply, d.eng.Done)
	}
	t.OnDone(done)
	if e != nil {
		done(t, nil, e)
		return <-out
	}
	d.eng.Run(t)
	select {
	case reply := <-out:
		return reply
	case <-ctx.Done():
		d.eng.Cancel(t, callerGone(ctx))
		return <-out
	}
}
