package dispatcher

import (
	"context"
	"errors"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/streams"
)

// Settle for the durable tier: a task from REACH_TASKS runs down the same
// path (routeWait) and is acknowledged only once its one outcome is claimed
// (durable.Claims) and stored: its result in REACH_RESULTS, a dead letter
// in REACH_DLQ or an entry for a person in REACH_REVIEW; while no instance
// can take it, it waits in the stream.

// startDurable joins the durable consumer shared by every replica.
func (d *Dispatcher) startDurable(ctx context.Context, js jetstream.JetStream) error {
	var err error
	if d.results, err = js.Stream(ctx, streams.StreamResults); err != nil {
		return streams.OpenError("dispatcher", streams.StreamResults, err)
	}
	if d.outcomes, err = js.KeyValue(ctx, streams.BucketOutcomes); err != nil {
		return streams.OpenError("dispatcher", streams.BucketOutcomes, err)
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
	d.stats.durable.Add(1)
	d.tasks.Add(1)
	go func() {
		defer d.tasks.Done()
		d.handleDurable(msg)
	}()
}

// handleDurable takes a durable task to exactly one recorded outcome before
// acknowledging it: a result in REACH_RESULTS, a dead letter, a review entry
// — or, while no capable instance has capacity, back into the stream to wait.
func (d *Dispatcher) handleDurable(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		d.log.Error().Err(err).Msg("durable task without metadata")
		return
	}
	h := msg.Headers()
	if h == nil {
		h = nats.Header{}
	}
	if h.Get(streams.HeaderRequestID) == "" {
		id := durable.RequestIDOfSubmission(h)
		if streams.ValidateInstanceID(id) != nil {
			id = "task-" + strconv.FormatUint(md.Sequence.Stream, 10)
		}
		h.Set(streams.HeaderRequestID, id)
	}
	m := &nats.Msg{Subject: msg.Subject(), Header: h, Data: msg.Data()}
	if name := d.cfg.Subjects.CapabilityFromSubmit(msg.Subject()); d.Resolves(name) &&
		(d.authorizer == nil || d.authorizer.Authorize(name, m, true) == nil) { // refused: parked below like any task
		d.resolver.Durable(msg, name) // a workflow's run; it acknowledges once its outcome is recorded
		return
	}
	t, e := d.newTask(m, d.cfg.Subjects.CapabilityFromSubmit(msg.Subject()), md.Timestamp, true)
	if e == nil && h.Get(streams.HeaderIdempotencyKey) == "" {
		// Durable delivery is at least once: a redelivery after a crash must
		// replay, not re-execute. The key names the submission, its caller
		// and request id: another caller's task under the same id is
		// another execution, and is never answered this one's outcome.
		h.Set(streams.HeaderIdempotencyKey, t.durable().Key())
	}
	t.seq = md.Sequence.Stream
	if md.NumDelivered > 1 {
		// An earlier delivery may have decided the outcome already (its
		// acknowledgement was lost, its replica died after claiming, or a
		// publish timed out although it landed): that one is recorded, no
		// other.
		held, found, err := d.claims().Held(claimKey(t))
		switch {
		case err != nil:
			t.log.Warn().Err(err).Msg("durable redelivery: the outcome claims cannot be read; the task waits")
			_ = msg.NakWithDelay(durable.BufferDelayMax)
			return
		case found:
			d.recordClaimed(t, m, msg, md, held, e)
			return
		case d.resultRecorded(t):
			// A result without a claim (recorded by a dispatcher from
			// before claims): the task has its outcome.
			t.log.Debug().Uint64("delivered", md.NumDelivered).Msg("redelivered task already has its result")
			d.ackDurable(t, msg)
			return
		}
	}

	stop := d.keepInProgress(msg)
	var res *nats.Msg
	if e == nil {
		res, e = d.routeWait(t)
	}
	stop()

	var resultErr error
	if e == nil {
		_, resultErr = durable.ResultMsg(d.resultSubject(t), t.durable(), res, nil, d.nc.MaxPayload())
	}
	c, wait := durable.Decide(t.durable(), e, resultErr, t.inDoubt, t.deadline, md.NumDelivered)
	if wait > 0 {
		d.stats.buffered.Add(1)
		t.log.Debug().Str("code", string(e.Code)).Dur("retry_in", wait).Msg("no capacity: task waits in the stream")
		if err := msg.NakWithDelay(wait); err != nil {
			t.log.Warn().Err(err).Msg("durable nak")
		}
		return
	}
	held, err := d.claims().Take(claimKey(t), t.requestID, c)
	switch {
	case errors.Is(err, durable.ErrClaimed):
		// Another delivery of this task (two replicas held it at once)
		// decided first: its outcome is the one recorded.
		t.log.Warn().Str("claimed", held.Outcome).Str("by", held.By).Str("discarded", c.Outcome).
			Msg("durable task: another delivery claimed its outcome first; this one's is discarded")
		d.recordClaimed(t, m, msg, md, held, e)
		return
	case err != nil:
		t.log.Error().Err(err).Msg("durable outcome not claimed; the task will be redelivered")
		_ = msg.NakWithDelay(durable.BufferDelayMax)
		return
	}
	d.record(t, m, msg, md, c, res, e)
}

// record publishes the outcome c this delivery claimed for t — its result
// res (or business rejection e), or the parked entry — then records its
// event and acknowledges it. An outcome not published leaves the task
// unacknowledged: its redelivery records the claimed outcome.
func (d *Dispatcher) record(t *task, m *nats.Msg, msg jetstream.Msg, md *jetstream.MsgMetadata, c durable.Claim, res *nats.Msg, e *streams.Error) {
	var err error
	switch c.Outcome {
	case events.OutcomeResult:
		err = d.recordResult(t, res, e)
	case events.OutcomeReview:
		err = d.park(t, m, d.cfg.Subjects.Review(t.capability), c.Reason, c.Err())
	default:
		err = d.park(t, m, d.cfg.Subjects.DeadLetter(t.capability), c.Reason, c.Err())
	}
	if err != nil {
		t.log.Error().Err(err).Msg("durable outcome not recorded; the task will be redelivered")
		_ = msg.NakWithDelay(durable.BufferDelayMax)
		return
	}
	if c.Outcome != events.OutcomeResult || e != nil {
		e = c.Err()
	}
	d.recordEvent(t, md.Timestamp, c.Outcome, e)
	d.ackDurable(t, msg)
}

// recordClaimed records the outcome held claims for a delivery of t that
// did not decide it: a parked entry is published again as claimed (under
// its message id: the stream drops it if the first publish landed); a
// result is found in REACH_RESULTS, or — its publish lost — obtained again
// by routing the task, whose idempotency key replays the stored outcome,
// and recorded. Until it can be, the task waits in the stream.
func (d *Dispatcher) recordClaimed(t *task, m *nats.Msg, msg jetstream.Msg, md *jetstream.MsgMetadata, held durable.Claim, e *streams.Error) {
	t.node, t.attempts = held.Node, held.Attempts
	if held.Outcome != events.OutcomeResult {
		d.record(t, m, msg, md, held, nil, nil)
		return
	}
	if d.resultRecorded(t) {
		t.log.Debug().Uint64("delivered", md.NumDelivered).Msg("redelivered task already has its result")
		d.ackDurable(t, msg)
		return
	}
	if e != nil && held.Code == "" {
		t.log.Error().Str("code", string(e.Code)).Msg("durable task claimed a result its redelivery cannot route again; it waits")
		_ = msg.NakWithDelay(durable.BufferDelayMax)
		return
	}
	var res *nats.Msg
	if held.Code == "" { // a result: the agent's idempotency key replays it
		// A task is routed once (this delivery may have routed t already):
		// the replay goes as a task of its own.
		seq := t.seq
		if t, e = d.newTask(m, t.capability, md.Timestamp, true); e != nil {
			t.log.Error().Str("code", string(e.Code)).Msg("durable task claimed a result its redelivery cannot route again; it waits")
			_ = msg.NakWithDelay(durable.BufferDelayMax)
			return
		}
		t.seq = seq
		// The work was done: its deadline no longer bounds getting the
		// stored outcome back.
		t.deadline = time.Now().Add(d.cfg.Deadline)
		stop := d.keepInProgress(msg)
		res, e = d.routeWait(t)
		stop()
		if e != nil {
			t.log.Warn().Str("code", string(e.Code)).Str("error", e.Message).
				Msg("durable task's claimed result not yet obtained again; it waits")
			_ = msg.NakWithDelay(durable.BufferDelayMax)
			return
		}
	}
	d.record(t, m, msg, md, held, res, held.Err())
}

// ackDurable acknowledges a durable task whose outcome is recorded.
func (d *Dispatcher) ackDurable(t *task, msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		// Recorded but not acknowledged: the redelivery finds the result
		// (resultRecorded), or replays the stored outcome (idempotency key),
		// and the record is deduplicated.
		t.log.Warn().Err(err).Msg("durable ack")
	}
}

// resultRecorded reports whether REACH_RESULTS holds a result for t (its
// caller's, under its request id); a failed lookup says no (the task then
// runs, and replays).
func (d *Dispatcher) resultRecorded(t *task) bool {
	if t.owner == "" { // refused before its caller was known: it has no result
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := d.results.GetLastMsgForSubject(ctx, d.cfg.Subjects.Result(t.owner, t.requestID))
	return err == nil
}

// keepInProgress is KeepInProgress at the replica's ack wait.
func (d *Dispatcher) keepInProgress(msg jetstream.Msg) (stop func()) {
	return durable.KeepInProgress(msg, d.cfg.DurableAckWait)
}

// claims are the replica's outcome claims (durable.Claims).
func (d *Dispatcher) claims() durable.Claims { return durable.Claims{KV: d.outcomes, By: d.cfg.Name} }

// claimKey is the REACH_OUTCOMES key of durable task t.
func claimKey(t *task) string { return durable.ClaimKey(t.seq, t.requestID) }

// durable is what the durable tier records of t.
func (t *task) durable() durable.Task {
	return durable.Task{Owner: t.owner, RequestID: t.requestID, OrchID: t.orchID, ContentType: t.contentType,
		Seq: t.seq, Node: t.node, Attempts: t.attempts}
}

// resultSubject is where t's result is stored: its caller's, under its
// request id.
func (d *Dispatcher) resultSubject(t *task) string {
	return d.cfg.Subjects.Result(t.owner, t.requestID)
}

// recordResult stores a durable task's result (or business rejection) in
// REACH_RESULTS.
func (d *Dispatcher) recordResult(t *task, res *nats.Msg, e *streams.Error) error {
	out, err := durable.ResultMsg(d.resultSubject(t), t.durable(), res, e, d.nc.MaxPayload())
	if err != nil {
		return err
	}
	if _, err := durable.Publish(d.js, out); err != nil {
		return err
	}
	t.log.Debug().Str("node", t.node).Msg("durable result recorded")
	return nil
}

// park records a task that has no result in REACH_DLQ or REACH_REVIEW, with
// its original headers and payload, the reason, the attempts and the error.
func (d *Dispatcher) park(t *task, m *nats.Msg, subject, reason string, e *streams.Error) error {
	out, dropped := durable.ParkMsg(subject, reason, t.durable(), m, e, d.nc.MaxPayload())
	if dropped != nil {
		t.log.Warn().Str("error", dropped.Error()).Msg("parked without its payload")
	}
	ack, err := durable.Publish(d.js, out)
	if err != nil {
		return err
	}
	// The entry's sequence is named by its stream (dlq_seq, review_seq),
	// as `agentreach dlq show <seq>` and `agentreach review show <seq>`
	// take it; the task's own seq is REACH_TASKS'.
	seqField := "dlq_seq"
	if ack.Stream == streams.StreamReview {
		seqField = "review_seq"
	}
	t.log.Info().Str("reason", reason).Str("code", string(e.Code)).Str("error", e.Message).Str("subject", subject).
		Str("parked_in", ack.Stream).Uint64(seqField, ack.Sequence).Msg("durable task parked")
	return nil
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
		Rate: d.cfg.DeadLetterReplayRate, Healthy: d.healthy, Replayed: func() { d.stats.replayed.Add(1) }, Log: d.log}
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
// is closed.
func (d *Dispatcher) healthy(capability string) bool {
	if d.Resolves(capability) {
		return true // a workflow's run: its steps find their own instances
	}
	rs := d.table.Candidates(capability)
	now := time.Now()
	for i := 0; i < rs.Len(); i++ {
		if d.loads.Of(rs.Instances[i].ID).Breaker.Status(now).State == selection.BreakerClosed {
			return true
		}
	}
	return false
}
