package engine

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/tracing"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// A task's path through a replica, stage by stage. Each stage is one file,
// read in this order:
//
//  1. admit.go    — the replica's in-flight cap and the caller's fair
//                   share (the reply subject is checked by the entry)
//  2. decode.go   — the request's headers and payload read once: ids,
//                   content type, requirements, hops, timeouts, budget,
//                   the caller proven (Authorizer)
//  3. resolve.go  — the capability's policy (policy.go, config.Capability), a workflow's name
//                   to the Resolver, the candidates that meet the
//                   requirements and declarations, the input schema check
//  4. pick.go     — one instance by strategy, load and breakers
//                   (dispatcher/selection), or a wait for a free slot
//                   (queue.go)
//  5. deliver.go  — the delivery, its ACK and call timers, its replies
//                   (dispatcher/inbox), the hedge (hedge.go), cancellation
//                   (cancel.go), a streamed task's chunks (stream.go)
//  6. settle.go   — a delivery's outcome into breaker (shared with the
//                   other replicas by dispatcher/breakers), load and
//                   latency, the retry decision, the reply through the
//                   outbound gate (Conclude); a durable task's outcome
//                   for durable.Tier, which the Dispatcher routes for
//                   (RouteWait)
//  7. record.go   — the event record, the counts; the span ends
//                   (dispatcher/tracing)
//
// A task comes in by one of the Dispatcher's entries — its subscription to
// reach.task (receive.go there), Call and Stream in process, OpenShared for
// a broadcast, the durable consumer (durable.go there) — which admit it
// (Admit), read it (NewTask) and Run it.
//
// Data flows one way: a stage reads what the earlier ones put on the task
// and never calls back up, except that a retry (settle) runs the path again
// from resolve.

// A task has no goroutine of its own. Its entry — the Dispatcher's
// subscription callback, Call or Stream — starts it (NewTask, Run: route,
// publish the delivery); the agent's replies, arriving on
// the inbox's goroutine, and per-delivery timers move it on; done runs once
// with its outcome. Each delivery ends exactly once — by its result, an
// error reply, its timer or its instance leaving — whichever claims it first.

// Run delivers t to the next instance, or ends it when no instance, retry
// or time is left. While tasks of its capability wait for a slot, it
// queues behind them.
func (en *Engine) Run(t *Task) {
	if e := t.stopped.Load(); e != nil {
		t.done(t, nil, e)
		return
	}
	if !t.started {
		t.started = true
		en.TraceTask(t)
		if e := en.start(t); e != nil {
			t.done(t, nil, e)
			return
		}
	}
	if time.Until(t.deadline) <= 0 {
		t.done(t, nil, streams.NewError(streams.CodeDeadlineExceeded, "overall deadline passed after %d attempts", t.attempts))
		return
	}
	if q := en.waiting(t.queueKey()); q != nil && q.Len() > 0 && t.pol.QueueWait > 0 {
		en.enqueue(q, t)
		return
	}
	inst, probe, why := en.route(t)
	en.proceed(t, inst, probe, why)
}

// proceed sends t to inst, which route picked (and reserved a slot of),
// or acts on why route found none: wait for a slot, or end.
func (en *Engine) proceed(t *Task, inst *registry.Instance, probe bool, why NoRoute) {
	switch {
	case inst != nil:
		t.mu.Lock()
		t.attempts++
		t.node = inst.ID
		t.mu.Unlock()
		en.send(t, inst, probe, false)
	case why == RouteFull && t.pol.QueueWait > 0:
		en.enqueue(en.queueOf(t.queueKey()), t)
	case why == RouteFull:
		t.attempts++ // a wait for capacity uses a retry too
		en.retry(t, why.Error(en, t), OutcomeBusy)
	case t.last != nil && (why == RouteNoAgent || why == RouteGone):
		en.endUnrouted(t, why.Error(en, t))
	default:
		t.done(t, nil, why.Error(en, t))
	}
}

// route resolves t's candidates (resolve.go) and picks one (pick.go),
// with a slot of it reserved; when none can take t now it says why.
func (en *Engine) route(t *Task) (inst *registry.Instance, probe bool, why NoRoute) {
	rs, why := en.candidates(t)
	if rs == nil {
		return nil, false, why
	}
	return en.pick(t, rs)
}

// RouteWait runs t to its outcome and waits for it (the durable tier,
// which has a goroutine per task anyway).
func (en *Engine) RouteWait(t *Task) (res *nats.Msg, e *streams.Error) {
	done := make(chan struct{})
	t.done = func(_ *Task, r *nats.Msg, err *streams.Error) {
		t.Finish()
		if err == nil {
			en.scores.Remember(t.requestID, t.source, t.node)
		}
		tracing.End(t.span, err)
		res, e = r, err
		close(done)
	}
	en.Run(t)
	<-done
	return res, e
}
