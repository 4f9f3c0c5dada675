package dispatcher

import (
	"context"
	"errors"
	"fmt"
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
		id := RequestIDOfSubmission(h)
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
		h.Set(streams.HeaderIdempotencyKey, durableKey(t))
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

	c, wait := d.decide(t, res, e, md.NumDelivered)
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

// decide returns the outcome a durable task gets from its routing's
// answer res or error e — or, while no capable instance has capacity and
// its deadline has not passed, how long it waits in the stream instead.
func (d *Dispatcher) decide(t *task, res *nats.Msg, e *streams.Error, delivered uint64) (durable.Claim, time.Duration) {
	park := func(where, reason string, e *streams.Error) durable.Claim {
		return durable.Claim{Outcome: where, Reason: reason, Code: string(e.Code), Message: e.Message, Node: t.node, Attempts: t.attempts}
	}
	switch {
	case e == nil:
		if _, err := d.durableResultMsg(t, res, nil); err != nil { // a result that cannot be stored: no retry can store it
			return park(OutcomeDeadLetter, ReasonPoison, streams.AsError(err)), 0
		}
		return durable.Claim{Outcome: OutcomeResult, Node: t.node, Attempts: t.attempts}, 0
	case e.Code == streams.CodeBizReject:
		return durable.Claim{Outcome: OutcomeResult, Code: string(e.Code), Message: e.Message, Node: t.node, Attempts: t.attempts}, 0
	case e.Code == streams.CodeDeadlineExceeded:
		return park(OutcomeReview, ReasonDeadline, e), 0
	case t.inDoubt:
		// Whether the side effect happened is unknown, and the key will not
		// run again by itself: a person decides (`agentreach review resolve`),
		// never the dead-letter replayer.
		return park(OutcomeReview, ReasonInDoubt, e), 0
	case durable.Buffered(e.Code):
		if time.Now().After(t.deadline) {
			return park(OutcomeReview, ReasonDeadline, e), 0
		}
		return durable.Claim{}, min(durable.BufferDelayBase<<min(delivered-1, 8), durable.BufferDelayMax)
	case e.Code == streams.CodeBadRequest || e.Code == streams.CodePayloadTooLarge || e.Code == streams.CodeLoopDetected ||
		e.Code == streams.CodeUnauthorized:
		return park(OutcomeDeadLetter, ReasonPoison, e), 0
	}
	return park(OutcomeDeadLetter, ReasonFailed, e), 0
}

// record publishes the outcome c this delivery claimed for t — its result
// res (or business rejection e), or the parked entry — then records its
// event and acknowledges it. An outcome not published leaves the task
// unacknowledged: its redelivery records the claimed outcome.
func (d *Dispatcher) record(t *task, m *nats.Msg, msg jetstream.Msg, md *jetstream.MsgMetadata, c durable.Claim, res *nats.Msg, e *streams.Error) {
	var err error
	switch c.Outcome {
	case OutcomeResult:
		err = d.recordResult(t, res, e)
	case OutcomeReview:
		err = d.park(t, m, d.cfg.Subjects.Review(t.capability), c.Reason, c.Err())
	default:
		err = d.park(t, m, d.cfg.Subjects.DeadLetter(t.capability), c.Reason, c.Err())
	}
	if err != nil {
		t.log.Error().Err(err).Msg("durable outcome not recorded; the task will be redelivered")
		_ = msg.NakWithDelay(durable.BufferDelayMax)
		return
	}
	if c.Outcome != OutcomeResult || e != nil {
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
	if held.Outcome != OutcomeResult {
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

// durableKey is the idempotency key the dispatcher gives a durable task
// that has none: "<source>=<request-id>". '=' is in no name or request id,
// so two submissions never share one, and it is a valid KV key token.
func durableKey(t *task) string { return t.owner + "=" + t.requestID }

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

// durableResultMsg builds the REACH_RESULTS message of a durable task's result
// res (or business rejection e), published on
// reach.result.<source>.<request-id>, where only its caller reads it. A
// result that exceeds max_payload with the dispatcher's headers is a
// PAYLOAD_TOO_LARGE error.
func (d *Dispatcher) durableResultMsg(t *task, res *nats.Msg, e *streams.Error) (*nats.Msg, error) {
	out := nats.NewMsg(d.cfg.Subjects.Result(t.owner, t.requestID))
	if res != nil {
		out.Data = res.Data
		for k, v := range res.Header {
			out.Header[k] = v
		}
		out.Header.Del(streams.HeaderActive)
		out.Header.Set(streams.HeaderNode, t.node)
	} else {
		out = streams.ErrorReply(out.Subject, t.contentType, t.requestID, e)
		out.Header.Set(streams.HeaderNode, t.node)
	}
	out.Header.Set(streams.HeaderRequestID, t.requestID)
	out.Header.Set(streams.HeaderOrchestrationID, t.orchID)
	out.Header.Set(streams.HeaderAttempt, strconv.Itoa(t.attempts))
	// Deduplicated per caller and request id: another caller's task under
	// the same id has a result of its own.
	out.Header.Set(streams.HeaderMsgID, "result-"+streams.SubmissionID(t.owner, t.requestID))
	if err := streams.CheckSize(out, d.nc.MaxPayload()); err != nil {
		e := streams.AsError(err)
		e.Message = "the result of " + t.node + ", with the dispatcher's headers: " + e.Message
		return nil, e
	}
	return out, nil
}

// recordResult stores a durable task's result (or business rejection) in
// REACH_RESULTS.
func (d *Dispatcher) recordResult(t *task, res *nats.Msg, e *streams.Error) error {
	out, err := d.durableResultMsg(t, res, e)
	if err != nil {
		return err
	}
	if _, err := d.publishDurable(out); err != nil {
		return err
	}
	t.log.Debug().Str("node", t.node).Msg("durable result recorded")
	return nil
}

// park records a task that has no result in REACH_DLQ or REACH_REVIEW, with
// its original headers and payload, the reason, the attempts and the error.
func (d *Dispatcher) park(t *task, m *nats.Msg, subject, reason string, e *streams.Error) error {
	out := nats.NewMsg(subject)
	out.Data = m.Data
	for k, v := range m.Header {
		out.Header[k] = v
	}
	// No stored copy keeps the caller's proof, which whoever reads the
	// entry could send again as the caller: a replay is signed anew by a
	// dispatcher identity (Replay).
	out.Header.Del(streams.HeaderSignature)
	out.Header.Del(streams.HeaderReplayedBy)
	count := streams.IntHeader(m.Header, streams.HeaderDLQCount)
	out.Header.Set(streams.HeaderDLQReason, reason)
	out.Header.Set(streams.HeaderDLQAttempts, strconv.Itoa(t.attempts))
	out.Header.Set(streams.HeaderError, string(e.Code))
	out.Header.Set(streams.HeaderStatus, string(streams.StatusFailed))
	out.Header.Set(streams.HeaderLastError, e.Message)
	if t.node != "" {
		out.Header.Set(streams.HeaderNode, t.node)
	}
	// Deduplicated per submission (its REACH_TASKS sequence, which its
	// redeliveries share) and replay, not per request id: another
	// caller's task under the same id, or a task refused for naming a
	// caller it could not prove, has an entry of its own.
	out.Header.Set(streams.HeaderMsgID, fmt.Sprintf("parked-%d-%d", t.seq, count))
	d.fitParked(t, out)
	ack, err := d.publishDurable(out)
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

// fitParked makes a parked entry fit max_payload, which the task alone
// did, but not always with the entry's headers added. It first leaves out
// the idempotency key the dispatcher added (a replay adds it again), then
// the payload, saying so in Reach-DLQ-Dropped: an entry that tells what
// happened beats a task redelivered for ever because its outcome cannot be
// stored.
func (d *Dispatcher) fitParked(t *task, out *nats.Msg) {
	limit := d.nc.MaxPayload()
	if streams.CheckSize(out, limit) == nil {
		return
	}
	if out.Header.Get(streams.HeaderIdempotencyKey) == durableKey(t) {
		out.Header.Del(streams.HeaderIdempotencyKey)
	}
	if err := streams.CheckSize(out, limit); err != nil {
		t.log.Warn().Str("error", err.Error()).Msg("parked without its payload")
		out.Header.Set(streams.HeaderDLQDropped, strconv.Itoa(len(out.Data)))
		out.Data = nil
	}
}

func (d *Dispatcher) publishDurable(m *nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := d.js.PublishMsg(ctx, m)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("publish %s: no JetStream ack in 5s", m.Subject)
	}
	return ack, err
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
		if d.loads.Of(rs.Instances[i].ID).Breaker.Status(now).State == BreakerClosed {
			return true
		}
	}
	return false
}
