package durable

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/streams"
)

// Settle for the durable tier: a task from REACH_TASKS runs down the
// dispatcher's path (Router) and is acknowledged only once its one outcome
// is claimed (Claims) and stored: its result in REACH_RESULTS, a dead
// letter in REACH_DLQ or an entry for a person in REACH_REVIEW; while no
// instance can take it, it waits in the stream.

// Router is the dispatcher's side of the durable tier: it reads a
// submission into a task and routes it. Its methods run on the task's own
// goroutine and may block while the task runs.
type Router interface {
	// Resolve hands submission msg (read into m) to whatever serves name
	// instead of a capability's instances — a workflow's run, which
	// acknowledges msg once its outcome is recorded — when the caller may
	// call it; it reports whether it did.
	Resolve(msg jetstream.Msg, m *nats.Msg, name string) bool
	// Decode reads m, a task of capability submitted at submitted and
	// stored at seq in REACH_TASKS, as every task is read. It returns the
	// task even with an error, which the task then ends with.
	Decode(m *nats.Msg, capability string, submitted time.Time, seq uint64) (Routing, *streams.Error)
}

// Routing is one durable task in the dispatcher (Router.Decode).
type Routing interface {
	// Task is what the tier records of it; Node and Attempts once routed.
	Task() Task
	// Capability is what it asks for.
	Capability() string
	// Deadline is its overall deadline; SetDeadline moves it.
	Deadline() time.Time
	SetDeadline(time.Time)
	// Claimed takes the instance and attempts of the claim another
	// delivery of it made (for its record).
	Claimed(node string, attempts int)
	// Route runs it to its outcome and waits for it: the result, or the
	// error and whether that error is an idempotent execution's unknown
	// outcome (Reach-In-Doubt).
	Route() (res *nats.Msg, e *streams.Error, inDoubt bool)
	// Record writes its event record: outcome (events.Outcome*) with e.
	Record(submitted time.Time, outcome string, e *streams.Error)
}

// Tier takes each task of REACH_TASKS to exactly one recorded outcome.
// Set its fields, then Open it before the first Handle.
type Tier struct {
	JS       jetstream.JetStream
	NC       *nats.Conn // for the server's max payload
	Subjects streams.Subjects
	// By names the replica in the outcome claims it takes.
	By string
	// AckWait is the consumer's ack wait: in-progress acks extend it while
	// a task runs.
	AckWait time.Duration
	// Deadline bounds getting a claimed result back from its instance
	// once more, when its first publish was lost.
	Deadline time.Duration
	Router   Router
	// Buffered, if set, is called for each task put back to wait for
	// capacity.
	Buffered func()
	Log      *zerolog.Logger

	results  jetstream.Stream   // REACH_RESULTS, for redelivered tasks
	outcomes jetstream.KeyValue // REACH_OUTCOMES: one claim per task (Claims)
}

// Open opens the stream of results and the bucket of outcome claims.
func (tr *Tier) Open(ctx context.Context) error {
	var err error
	if tr.results, err = tr.JS.Stream(ctx, streams.StreamResults); err != nil {
		return streams.OpenError("dispatcher", streams.StreamResults, err)
	}
	if tr.outcomes, err = tr.JS.KeyValue(ctx, streams.BucketOutcomes); err != nil {
		return streams.OpenError("dispatcher", streams.BucketOutcomes, err)
	}
	return nil
}

// Handle takes a durable task to exactly one recorded outcome before
// acknowledging it: a result in REACH_RESULTS, a dead letter, a review
// entry — or, while no capable instance has capacity, back into the stream
// to wait.
func (tr *Tier) Handle(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		tr.Log.Error().Err(err).Msg("durable task without metadata")
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
	name := tr.Subjects.CapabilityFromSubmit(msg.Subject())
	if tr.Router.Resolve(msg, m, name) { // refused: parked below like any task
		return
	}
	r, e := tr.Router.Decode(m, name, md.Timestamp, md.Sequence.Stream)
	if e == nil && h.Get(streams.HeaderIdempotencyKey) == "" {
		// Durable delivery is at least once: a redelivery after a crash must
		// replay, not re-execute. The key names the submission, its caller
		// and request id: another caller's task under the same id is
		// another execution, and is never answered this one's outcome.
		h.Set(streams.HeaderIdempotencyKey, r.Task().Key())
	}
	log := tr.taskLog(r)
	if md.NumDelivered > 1 {
		// An earlier delivery may have decided the outcome already (its
		// acknowledgement was lost, its replica died after claiming, or a
		// publish timed out although it landed): that one is recorded, no
		// other.
		held, found, err := tr.claims().Held(claimKey(r))
		switch {
		case err != nil:
			log.Warn().Err(err).Msg("durable redelivery: the outcome claims cannot be read; the task waits")
			_ = msg.NakWithDelay(BufferDelayMax)
			return
		case found:
			tr.recordClaimed(r, m, msg, md, held, e)
			return
		case tr.resultRecorded(r):
			// A result without a claim (recorded by a dispatcher from
			// before claims): the task has its outcome.
			log.Debug().Uint64("delivered", md.NumDelivered).Msg("redelivered task already has its result")
			tr.ack(r, msg)
			return
		}
	}

	stop := KeepInProgress(msg, tr.AckWait)
	var res *nats.Msg
	inDoubt := false
	if e == nil {
		res, e, inDoubt = r.Route()
	}
	stop()

	var resultErr error
	if e == nil {
		_, resultErr = ResultMsg(tr.resultSubject(r), r.Task(), res, nil, tr.NC.MaxPayload())
	}
	c, wait := Decide(r.Task(), e, resultErr, inDoubt, r.Deadline(), md.NumDelivered)
	if wait > 0 {
		if tr.Buffered != nil {
			tr.Buffered()
		}
		log.Debug().Str("code", string(e.Code)).Dur("retry_in", wait).Msg("no capacity: task waits in the stream")
		if err := msg.NakWithDelay(wait); err != nil {
			log.Warn().Err(err).Msg("durable nak")
		}
		return
	}
	held, err := tr.claims().Take(claimKey(r), r.Task().RequestID, c)
	switch {
	case errors.Is(err, ErrClaimed):
		// Another delivery of this task (two replicas held it at once)
		// decided first: its outcome is the one recorded.
		log.Warn().Str("claimed", held.Outcome).Str("by", held.By).Str("discarded", c.Outcome).
			Msg("durable task: another delivery claimed its outcome first; this one's is discarded")
		tr.recordClaimed(r, m, msg, md, held, e)
		return
	case err != nil:
		log.Error().Err(err).Msg("durable outcome not claimed; the task will be redelivered")
		_ = msg.NakWithDelay(BufferDelayMax)
		return
	}
	tr.record(r, m, msg, md, c, res, e)
}

// record publishes the outcome c this delivery claimed for r — its result
// res (or business rejection e), or the parked entry — then records its
// event and acknowledges it. An outcome not published leaves the task
// unacknowledged: its redelivery records the claimed outcome.
func (tr *Tier) record(r Routing, m *nats.Msg, msg jetstream.Msg, md *jetstream.MsgMetadata, c Claim, res *nats.Msg, e *streams.Error) {
	var err error
	switch c.Outcome {
	case events.OutcomeResult:
		err = tr.recordResult(r, res, e)
	case events.OutcomeReview:
		err = tr.park(r, m, tr.Subjects.Review(r.Capability()), c.Reason, c.Err())
	default:
		err = tr.park(r, m, tr.Subjects.DeadLetter(r.Capability()), c.Reason, c.Err())
	}
	if err != nil {
		tr.taskLog(r).Error().Err(err).Msg("durable outcome not recorded; the task will be redelivered")
		_ = msg.NakWithDelay(BufferDelayMax)
		return
	}
	if c.Outcome != events.OutcomeResult || e != nil {
		e = c.Err()
	}
	r.Record(md.Timestamp, c.Outcome, e)
	tr.ack(r, msg)
}

// recordClaimed records the outcome held claims for a delivery of r that
// did not decide it: a parked entry is published again as claimed (under
// its message id: the stream drops it if the first publish landed); a
// result is found in REACH_RESULTS, or — its publish lost — obtained again
// by routing the task, whose idempotency key replays the stored outcome,
// and recorded. Until it can be, the task waits in the stream.
func (tr *Tier) recordClaimed(r Routing, m *nats.Msg, msg jetstream.Msg, md *jetstream.MsgMetadata, held Claim, e *streams.Error) {
	r.Claimed(held.Node, held.Attempts)
	if held.Outcome != events.OutcomeResult {
		tr.record(r, m, msg, md, held, nil, nil)
		return
	}
	log := tr.taskLog(r)
	if tr.resultRecorded(r) {
		log.Debug().Uint64("delivered", md.NumDelivered).Msg("redelivered task already has its result")
		tr.ack(r, msg)
		return
	}
	if e != nil && held.Code == "" {
		log.Error().Str("code", string(e.Code)).Msg("durable task claimed a result its redelivery cannot route again; it waits")
		_ = msg.NakWithDelay(BufferDelayMax)
		return
	}
	var res *nats.Msg
	if held.Code == "" { // a result: the agent's idempotency key replays it
		// A task is routed once (this delivery may have routed r already):
		// the replay goes as a task of its own.
		if r, e = tr.Router.Decode(m, r.Capability(), md.Timestamp, md.Sequence.Stream); e != nil {
			log.Error().Str("code", string(e.Code)).Msg("durable task claimed a result its redelivery cannot route again; it waits")
			_ = msg.NakWithDelay(BufferDelayMax)
			return
		}
		// The work was done: its deadline no longer bounds getting the
		// stored outcome back.
		r.SetDeadline(time.Now().Add(tr.Deadline))
		stop := KeepInProgress(msg, tr.AckWait)
		res, e, _ = r.Route()
		stop()
		if e != nil {
			log.Warn().Str("code", string(e.Code)).Str("error", e.Message).
				Msg("durable task's claimed result not yet obtained again; it waits")
			_ = msg.NakWithDelay(BufferDelayMax)
			return
		}
	}
	tr.record(r, m, msg, md, held, res, held.Err())
}

// ack acknowledges a durable task whose outcome is recorded.
func (tr *Tier) ack(r Routing, msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		// Recorded but not acknowledged: the redelivery finds the result
		// (resultRecorded), or replays the stored outcome (idempotency key),
		// and the record is deduplicated.
		tr.taskLog(r).Warn().Err(err).Msg("durable ack")
	}
}

// resultRecorded reports whether REACH_RESULTS holds a result for r (its
// caller's, under its request id); a failed lookup says no (the task then
// runs, and replays).
func (tr *Tier) resultRecorded(r Routing) bool {
	if r.Task().Owner == "" { // refused before its caller was known: it has no result
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := tr.results.GetLastMsgForSubject(ctx, tr.resultSubject(r))
	return err == nil
}

// claims are the replica's outcome claims.
func (tr *Tier) claims() Claims { return Claims{KV: tr.outcomes, By: tr.By} }

// claimKey is the REACH_OUTCOMES key of r.
func claimKey(r Routing) string { t := r.Task(); return ClaimKey(t.Seq, t.RequestID) }

// resultSubject is where r's result is stored: its caller's, under its
// request id.
func (tr *Tier) resultSubject(r Routing) string {
	t := r.Task()
	return tr.Subjects.Result(t.Owner, t.RequestID)
}

// recordResult stores a durable task's result (or business rejection) in
// REACH_RESULTS.
func (tr *Tier) recordResult(r Routing, res *nats.Msg, e *streams.Error) error {
	t := r.Task()
	out, err := ResultMsg(tr.resultSubject(r), t, res, e, tr.NC.MaxPayload())
	if err != nil {
		return err
	}
	if _, err := Publish(tr.JS, out); err != nil {
		return err
	}
	tr.taskLog(r).Debug().Str("node", t.Node).Msg("durable result recorded")
	return nil
}

// park records a task that has no result in REACH_DLQ or REACH_REVIEW, with
// its original headers and payload, the reason, the attempts and the error.
func (tr *Tier) park(r Routing, m *nats.Msg, subject, reason string, e *streams.Error) error {
	log := tr.taskLog(r)
	out, dropped := ParkMsg(subject, reason, r.Task(), m, e, tr.NC.MaxPayload())
	if dropped != nil {
		log.Warn().Str("error", dropped.Error()).Msg("parked without its payload")
	}
	ack, err := Publish(tr.JS, out)
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
	log.Info().Str("reason", reason).Str("code", string(e.Code)).Str("error", e.Message).Str("subject", subject).
		Str("parked_in", ack.Stream).Uint64(seqField, ack.Sequence).Msg("durable task parked")
	return nil
}

// taskLog is the log of r: every line names its request id, capability,
// tier and place in REACH_TASKS.
func (tr *Tier) taskLog(r Routing) *zerolog.Logger {
	t := r.Task()
	l := tr.Log.With().Str("request_id", t.RequestID).Str("capability", r.Capability()).
		Str("tier", "durable").Str("stream", streams.StreamTasks).Uint64("seq", t.Seq).Logger()
	return &l
}
