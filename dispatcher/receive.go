package dispatcher

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/engine"
	"github.com/agent-reach/agentreach/streams"
)

// The entry of a task from NATS: the queue subscription to
// reach.task.<capability> hands each request to receive, which admits it
// (engine.Admit) and starts it down the engine's stages, or gives a
// workflow's name to the resolver; answer sends the outcome to the
// request's reply subject.

// receive runs on the subscription's goroutine: it admits the task and
// sends it on its way, or answers OVERLOADED.
func (d *Dispatcher) receive(m *nats.Msg) {
	if !d.answerable(m) {
		return
	}
	caller := engine.CallerOf(m.Header)
	if e := d.eng.Admit(caller); e != nil {
		d.refuse(m, e)
		return
	}
	if d.resolved(m, d.cfg.Subjects.CapabilityFromTask(m.Subject), caller) {
		return // a workflow's: the resolver answers and releases the slot
	}
	d.handle(m, caller) // answer releases the in-flight slot
}

// answerable reports whether the task m, received on reach.task, may be
// answered on its reply subject; one that may not is dropped and counted.
func (d *Dispatcher) answerable(m *nats.Msg) bool {
	if m.Reply == "" {
		d.dropped.Add(1)
		d.log.Warn().Str("subject", m.Subject).Msg("task without reply subject dropped (use request/reply)")
		return false
	}
	if rc, ok := d.authorizer.(ReplyChecker); ok && rc.CheckReply(m) != nil {
		d.dropped.Add(1)
		return false
	}
	return true
}

// refuse answers a request that starts no task with e (engine.Refusal).
func (d *Dispatcher) refuse(m *nats.Msg, e *streams.Error) {
	out := engine.Refusal(m, e)
	out.Subject = m.Reply
	if err := d.nc.PublishMsg(out); err != nil {
		d.log.Warn().Err(err).Str("request_id", out.Header.Get(streams.HeaderRequestID)).Msg("error reply failed")
	}
}

// resolved hands a task from reach.task to the resolver when it serves the
// name, on a goroutine that holds caller's in-flight slot and sends the
// reply to m.Reply; it reports whether it did.
func (d *Dispatcher) resolved(m *nats.Msg, name, caller string) bool {
	if !d.Resolves(name) {
		return false
	}
	go func() {
		defer d.eng.Done()
		out := d.eng.Direct(m, name)
		d.eng.Free(caller)
		out.Subject = m.Reply
		if err := d.nc.PublishMsg(out); err != nil {
			d.log.Warn().Err(err).Str("request_id", out.Header.Get(streams.HeaderRequestID)).Msg("reply failed")
		}
	}()
	return true
}

// handle starts one direct-tier task, which holds caller's in-flight slot;
// answer replies to the caller.
func (d *Dispatcher) handle(m *nats.Msg, caller string) {
	start := time.Now()
	t, e := d.eng.NewTask(m, d.cfg.Subjects.CapabilityFromTask(m.Subject), start, false)
	t.OnDone(func(t *engine.Task, res *nats.Msg, e *streams.Error) { d.answer(t, res, e, caller) })
	if e != nil {
		d.answer(t, nil, e, caller)
		return
	}
	if streamed(m.Header, m.Reply, false) {
		d.eng.StartRelay(t, d.publishToCaller(t), true)
	}
	d.eng.Run(t)
}

// streamed reports whether a task's chunks are relayed to its caller: a
// Direct-tier task whose caller sent Reach-Stream: 1 and waits for a reply.
func streamed(h nats.Header, reply string, durable bool) bool {
	return !durable && reply != "" && h.Get(streams.HeaderStream) == "1"
}

// answer ends a direct-tier task: the result or the error to the caller,
// and its feedback record; caller's in-flight slot goes back.
func (d *Dispatcher) answer(t *engine.Task, res *nats.Msg, e *streams.Error, caller string) {
	if t.Streamed() {
		out, _ := d.eng.Conclude(t, res, e)
		d.eng.Free(caller)
		d.eng.FinishRelay(t, out, d.eng.Done)
		return
	}
	defer d.eng.Done()
	out, e := d.eng.Conclude(t, res, e)
	d.eng.Free(caller)
	if out != nil {
		out.Subject = t.Request().Reply
		if err := d.nc.PublishMsg(out); err != nil {
			t.Log().Warn().Err(err).Str("code", string(streams.CodeOf(e))).Msg("reply to caller failed")
		}
	}
}

// publishToCaller is the sink of a streamed task from NATS: its caller's
// reply subject.
func (d *Dispatcher) publishToCaller(t *engine.Task) func(*nats.Msg) {
	return func(m *nats.Msg) {
		if err := d.nc.PublishMsg(m); err != nil {
			t.Log().Warn().Err(err).Str("status", m.Header.Get(streams.HeaderStatus)).Msg("stream message to caller failed")
		}
	}
}
