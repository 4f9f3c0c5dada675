package dispatcher

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/engine"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/streams"
)

// The entry of a task from the durable tier: the consumer of REACH_TASKS
// shared by every replica hands each task to durable.Tier, which takes it
// to its one recorded outcome; the Dispatcher is its durable.Router, which
// reads the submission into a task (engine.NewTask) and runs it down the
// engine's stages like any other (engine.RouteWait). The dead-letter
// replayer resubmits what was parked.

// startDurable joins the durable consumer shared by every replica.
func (d *Dispatcher) startDurable(ctx context.Context, js jetstream.JetStream) error {
	d.tier = durable.Tier{JS: js, NC: d.nc, Subjects: d.cfg.Subjects, By: d.cfg.Name, AckWait: d.cfg.DurableAckWait,
		Deadline: d.cfg.Deadline, Router: durableRouter{d}, Buffered: func() { d.buffered.Add(1) }, Log: &d.log}
	if err := d.tier.Open(ctx); err != nil {
		return err
	}
	cc, err := durable.Join(ctx, js, durable.ConsumerConfig{Name: d.cfg.DurableConsumer, AckWait: d.cfg.DurableAckWait,
		Pending: d.cfg.DurablePending, Filter: d.cfg.Subjects.SubmitWildcard(), Log: &d.log}, d.receiveDurable)
	if err != nil {
		return err
	}
	d.consume = cc
	return nil
}

// stopDurable stops pulling; the tasks already pulled are handed to
// goroutines (which Drain waits for).
func (d *Dispatcher) stopDurable() {
	if d.consume != nil {
		d.consume.Drain()
		<-d.consume.Closed()
	}
}

func (d *Dispatcher) receiveDurable(msg jetstream.Msg) {
	d.durable.Add(1)
	d.eng.Go(func() { d.tier.Handle(msg) })
}

// durableRouter is the dispatcher as the durable tier's durable.Router.
type durableRouter struct{ d *Dispatcher }

func (r durableRouter) Resolve(msg jetstream.Msg, m *nats.Msg, name string) bool {
	d := r.d
	if !d.Resolves(name) || d.authorizer != nil && d.authorizer.Authorize(name, m, true) != nil {
		return false // refused: parked like any task
	}
	d.resolver.Durable(msg, name) // a workflow's run; it acknowledges once its outcome is recorded
	return true
}

func (r durableRouter) Decode(m *nats.Msg, capability string, submitted time.Time, seq uint64) (durable.Routing, *streams.Error) {
	t, e := r.d.eng.NewTask(m, capability, submitted, true)
	t.SetSeq(seq)
	return durableTask{r.d.eng, t}, e
}

// durableTask is a task from REACH_TASKS as the durable tier sees it
// (durable.Routing).
type durableTask struct {
	eng *engine.Engine
	t   *engine.Task
}

func (dt durableTask) Task() durable.Task { return dt.t.Durable() }

func (dt durableTask) Capability() string { return dt.t.Capability() }

func (dt durableTask) Deadline() time.Time { return dt.t.Deadline() }

func (dt durableTask) SetDeadline(deadline time.Time) { dt.t.SetDeadline(deadline) }

func (dt durableTask) Claimed(node string, attempts int) { dt.t.Claimed(node, attempts) }

func (dt durableTask) Route() (*nats.Msg, *streams.Error, bool) {
	res, e := dt.eng.RouteWait(dt.t)
	return res, e, dt.t.InDoubt()
}

func (dt durableTask) Record(submitted time.Time, outcome string, e *streams.Error) {
	dt.eng.Record(dt.t, submitted, outcome, e)
}

// startReplayer replays dead letters every DeadLetterRetryInterval.
func (d *Dispatcher) startReplayer() {
	d.replay = d.replayer()
	d.replay.Start()
}

func (d *Dispatcher) stopReplayer() {
	if d.replay != nil {
		d.replay.Stop()
	}
}

// replayer is the replica's dead-letter replayer: at its rate, for the
// capabilities it can route now, signed where the authorizer can sign.
func (d *Dispatcher) replayer() *durable.Replayer {
	r := &durable.Replayer{JS: d.js, Subjects: d.cfg.Subjects, Interval: d.cfg.DeadLetterRetryInterval,
		Rate: d.cfg.DeadLetterReplayRate, Healthy: d.healthy, Replayed: func() { d.replayed.Add(1) }, Log: d.log}
	// The parked copy no longer proves its caller (auth.Authorizer signs).
	if rs, ok := d.authorizer.(ReplaySigner); ok {
		r.Options = []durable.ReplayOption{durable.ReplaySign(rs.SignReplay)}
	}
	return r
}

// ReplayDeadLetters resubmits the dead letters of every capability that has
// a healthy instance now, at most DeadLetterReplayRate per second, and
// returns how many it resubmitted. Entries that fail again come back with
// their count raised.
func (d *Dispatcher) ReplayDeadLetters(ctx context.Context) (int, error) {
	return d.replayer().ReplayOnce(ctx)
}

// healthy reports whether capability has a routable instance whose breaker
// is closed: the replayer resubmits its dead letters only then.
func (d *Dispatcher) healthy(capability string) bool {
	if d.Resolves(capability) {
		return true // a workflow's run: its steps find their own instances
	}
	rs := d.table.Candidates(capability)
	now := time.Now()
	for i := 0; i < rs.Len(); i++ {
		if d.eng.Load(rs.Instances[i].ID).Breaker.Status(now).State == selection.BreakerClosed {
			return true
		}
	}
	return false
}
