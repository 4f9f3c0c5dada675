package engine

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/streams"
)

// Settle for the durable tier: a task from REACH_TASKS is taken to its one
// recorded outcome by durable.Tier, for which the engine is the
// durable.Router: it reads the submission into a task (NewTask) and runs
// it down the same path as any other (routeWait). The Dispatcher joins the
// consumer and runs the dead-letter replayer.

// OpenDurable readies the durable tier (durable.Tier), for which the
// engine is the router; the Dispatcher joins the consumer that hands its
// tasks to ReceiveDurable.
func (en *Engine) OpenDurable(ctx context.Context, js jetstream.JetStream) error {
	en.tier = durable.Tier{JS: js, NC: en.nc, Subjects: en.cfg.Subjects, By: en.cfg.Name, AckWait: en.cfg.DurableAckWait,
		Deadline: en.cfg.Deadline, Router: durableRouter{en}, Buffered: func() { en.stats.buffered.Add(1) }, Log: &en.log}
	return en.tier.Open(ctx)
}

// ReceiveDurable takes one task from REACH_TASKS to its outcome, on a
// goroutine of its own (which Wait waits for).
func (en *Engine) ReceiveDurable(msg jetstream.Msg) {
	en.stats.durable.Add(1)
	en.tasks.Add(1)
	go func() {
		defer en.tasks.Done()
		en.tier.Handle(msg)
	}()
}

// durableRouter is the engine as the durable tier's durable.Router.
type durableRouter struct{ en *Engine }

func (r durableRouter) Resolve(msg jetstream.Msg, m *nats.Msg, name string) bool {
	en := r.en
	if !en.Resolves(name) || en.hooks.Authorizer != nil && en.hooks.Authorizer.Authorize(name, m, true) != nil {
		return false // refused: parked like any task
	}
	en.hooks.Resolver.Durable(msg, name) // a workflow's run; it acknowledges once its outcome is recorded
	return true
}

func (r durableRouter) Decode(m *nats.Msg, capability string, submitted time.Time, seq uint64) (durable.Routing, *streams.Error) {
	t, e := r.en.NewTask(m, capability, submitted, true)
	t.seq = seq
	return durableTask{r.en, t}, e
}

// durableTask is a task from REACH_TASKS as the durable tier sees it
// (durable.Routing).
type durableTask struct {
	en *Engine
	t  *Task
}

func (dt durableTask) Task() durable.Task {
	t := dt.t
	return durable.Task{Owner: t.owner, RequestID: t.requestID, OrchID: t.orchID, ContentType: t.contentType,
		Seq: t.seq, Node: t.node, Attempts: t.attempts}
}

func (dt durableTask) Capability() string { return dt.t.capability }

func (dt durableTask) Deadline() time.Time { return dt.t.deadline }

func (dt durableTask) SetDeadline(deadline time.Time) { dt.t.deadline = deadline }

func (dt durableTask) Claimed(node string, attempts int) { dt.t.node, dt.t.attempts = node, attempts }

func (dt durableTask) Route() (*nats.Msg, *streams.Error, bool) {
	res, e := dt.en.routeWait(dt.t)
	return res, e, dt.t.inDoubt
}

func (dt durableTask) Record(submitted time.Time, outcome string, e *streams.Error) {
	dt.en.recordEvent(dt.t, submitted, outcome, e)
}

// Healthy reports whether capability has a routable instance whose breaker
// is closed (the dead-letter replayer's test).
func (en *Engine) Healthy(capability string) bool {
	if en.Resolves(capability) {
		return true // a workflow's run: its steps find their own instances
	}
	rs := en.table.Candidates(capability)
	now := time.Now()
	for i := 0; i < rs.Len(); i++ {
		if en.loads.Of(rs.Instances[i].ID).Breaker.Status(now).State == selection.BreakerClosed {
			return true
		}
	}
	return false
}
