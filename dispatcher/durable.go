package dispatcher

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/durable"
)

// The durable tier's lifecycle: the consumer of REACH_TASKS shared by
// every replica, whose tasks the engine takes to their outcomes
// (engine.OpenDurable, settle_durable.go there), and the dead-letter
// replayer.

// startDurable joins the durable consumer shared by every replica.
func (d *Dispatcher) startDurable(ctx context.Context, js jetstream.JetStream) error {
	if err := d.eng.OpenDurable(ctx, js); err != nil {
		return err
	}
	cc, err := durable.Join(ctx, js, durable.ConsumerConfig{Name: d.cfg.DurableConsumer, AckWait: d.cfg.DurableAckWait,
		Pending: d.cfg.DurablePending, Filter: d.cfg.Subjects.SubmitWildcard(), Log: &d.log}, d.eng.ReceiveDurable)
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
		Rate: d.cfg.DeadLetterReplayRate, Healthy: d.eng.Healthy, Replayed: d.eng.Replayed, Log: d.log}
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
