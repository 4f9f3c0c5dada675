package durable

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/streams"
)

// Task is what the durable tier records of a task from REACH_TASKS.
type Task struct {
	Owner       string // its caller's <source> token (streams.ResultSource); "" when refused before it was known
	RequestID   string
	OrchID      string
	ContentType string // its request's, for an error reply
	Seq         uint64 // its REACH_TASKS sequence
	Node        string // the instance of its last attempt
	Attempts    int
}

// Key is the idempotency key the dispatcher gives a durable task that has
// none: "<source>=<request-id>". '=' is in no name or request id, so two
// submissions never share one, and it is a valid KV key token.
func (t Task) Key() string { return t.Owner + "=" + t.RequestID }

// Decide returns the outcome a durable task t gets from its routing's
// error e (nil: a result, whose storing failed with resultErr when it
// cannot be stored) — or, while no capable instance has capacity and its
// deadline has not passed, how long it waits in the stream instead, its
// delivered-th delivery. inDoubt: e is an idempotent execution's unknown
// outcome (Reach-In-Doubt).
func Decide(t Task, e *streams.Error, resultErr error, inDoubt bool, deadline time.Time, delivered uint64) (Claim, time.Duration) {
	park := func(where, reason string, e *streams.Error) Claim {
		return Claim{Outcome: where, Reason: reason, Code: string(e.Code), Message: e.Message, Node: t.Node, Attempts: t.Attempts}
	}
	switch {
	case e == nil:
		if resultErr != nil { // a result that cannot be stored: no retry can store it
			return park(events.OutcomeDeadLetter, ReasonPoison, streams.AsError(resultErr)), 0
		}
		return Claim{Outcome: events.OutcomeResult, Node: t.Node, Attempts: t.Attempts}, 0
	case e.Code == streams.CodeBizReject:
		return Claim{Outcome: events.OutcomeResult, Code: string(e.Code), Message: e.Message, Node: t.Node, Attempts: t.Attempts}, 0
	case e.Code == streams.CodeDeadlineExceeded:
		return park(events.OutcomeReview, ReasonDeadline, e), 0
	case inDoubt:
		// Whether the side effect happened is unknown, and the key will not
		// run again by itself: a person decides (`agentreach review resolve`),
		// never the dead-letter replayer.
		return park(events.OutcomeReview, ReasonInDoubt, e), 0
	case Buffered(e.Code):
		if time.Now().After(deadline) {
			return park(events.OutcomeReview, ReasonDeadline, e), 0
		}
		return Claim{}, min(BufferDelayBase<<min(delivered-1, 8), BufferDelayMax)
	case e.Code == streams.CodeBadRequest || e.Code == streams.CodePayloadTooLarge || e.Code == streams.CodeLoopDetected ||
		e.Code == streams.CodeUnauthorized:
		return park(events.OutcomeDeadLetter, ReasonPoison, e), 0
	}
	return park(events.OutcomeDeadLetter, ReasonFailed, e), 0
}

// ResultMsg builds the REACH_RESULTS message of t's result res (or
// business rejection e), published on subject,
// reach.result.<source>.<request-id>, where only its caller reads it. A
// result that exceeds limit (max_payload) with the dispatcher's headers
// is a PAYLOAD_TOO_LARGE error.
func ResultMsg(subject string, t Task, res *nats.Msg, e *streams.Error, limit int64) (*nats.Msg, error) {
	out := nats.NewMsg(subject)
	if res != nil {
		out.Data = res.Data
		for k, v := range res.Header {
			out.Header[k] = v
		}
		out.Header.Del(streams.HeaderActive)
		out.Header.Set(streams.HeaderNode, t.Node)
	} else {
		out = streams.ErrorReply(out.Subject, t.ContentType, t.RequestID, e)
		out.Header.Set(streams.HeaderNode, t.Node)
	}
	out.Header.Set(streams.HeaderRequestID, t.RequestID)
	out.Header.Set(streams.HeaderOrchestrationID, t.OrchID)
	out.Header.Set(streams.HeaderAttempt, strconv.Itoa(t.Attempts))
	// Deduplicated per caller and request id: another caller's task under
	// the same id has a result of its own.
	out.Header.Set(streams.HeaderMsgID, "result-"+streams.SubmissionID(t.Owner, t.RequestID))
	if err := streams.CheckSize(out, limit); err != nil {
		e := streams.AsError(err)
		e.Message = "the result of " + t.Node + ", with the dispatcher's headers: " + e.Message
		return nil, e
	}
	return out, nil
}

// ParkMsg builds the REACH_DLQ or REACH_REVIEW entry (on subject) of t,
// which has no result: its original message m, the reason, the attempts
// and the error. It makes the entry fit limit (max_payload), which the
// task alone did, but not always with the entry's headers added: it first
// leaves out the idempotency key the dispatcher added (a replay adds it
// again), then the payload, saying so in Reach-DLQ-Dropped (and returning
// why as dropped): an entry that tells what happened beats a task
// redelivered for ever because its outcome cannot be stored.
func ParkMsg(subject, reason string, t Task, m *nats.Msg, e *streams.Error, limit int64) (out *nats.Msg, dropped error) {
	out = nats.NewMsg(subject)
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
	out.Header.Set(streams.HeaderDLQAttempts, strconv.Itoa(t.Attempts))
	out.Header.Set(streams.HeaderError, string(e.Code))
	out.Header.Set(streams.HeaderStatus, string(streams.StatusFailed))
	out.Header.Set(streams.HeaderLastError, e.Message)
	if t.Node != "" {
		out.Header.Set(streams.HeaderNode, t.Node)
	}
	// Deduplicated per submission (its REACH_TASKS sequence, which its
	// redeliveries share) and replay, not per request id: another
	// caller's task under the same id, or a task refused for naming a
	// caller it could not prove, has an entry of its own.
	out.Header.Set(streams.HeaderMsgID, fmt.Sprintf("parked-%d-%d", t.Seq, count))
	if streams.CheckSize(out, limit) == nil {
		return out, nil
	}
	if out.Header.Get(streams.HeaderIdempotencyKey) == t.Key() {
		out.Header.Del(streams.HeaderIdempotencyKey)
	}
	if err := streams.CheckSize(out, limit); err != nil {
		out.Header.Set(streams.HeaderDLQDropped, strconv.Itoa(len(out.Data)))
		out.Data = nil
		return out, err
	}
	return out, nil
}

// publishTimeout bounds storing one outcome.
const publishTimeout = 5 * time.Second

// Publish stores an outcome message (ResultMsg, ParkMsg) in its stream,
// waiting up to 5 s for the stream's acknowledgement.
func Publish(js jetstream.JetStream, m *nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	ack, err := js.PublishMsg(ctx, m)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("publish %s: no JetStream ack in 5s", m.Subject)
	}
	return ack, err
}
