package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// ReasonCompensation is the Reach-DLQ-Reason of a durable run parked in
// REACH_REVIEW because a compensation failed: what was done is not fully
// undone, and a person decides.
const ReasonCompensation = "compensation_failed"

// Event kinds of the records a run leaves in REACH_EVENTS, beside its
// tasks' own (which carry Reach-Parent-Id = the run id as ParentID). All
// three have Capability = the workflow. The run's record has RequestID =
// the run id and Outcome = where its answer went; step and decision
// records have RequestID <run-id>.<step> (the run id for a decision about
// the whole run), ParentID = the run id and Outcome = the step's status or
// the decision (Decision…).
const (
	KindRun      = "workflow"          // the run ended; Outcome is where its answer went
	KindStep     = "workflow_step"     // a step ended: done, failed, skipped or compensated
	KindDecision = "workflow_decision" // a decision: a condition's value, a skip, a fallback, …
)

// fail ends a run that failed before or outside its steps.
func (r *Run) fail(e *streams.Error) {
	r.Status, r.Error, r.Ended = RunFailed, e, time.Now()
}

// compensation reports whether any step was compensated, and whether any
// compensation failed.
func (r *Run) compensation() (done, failed bool) {
	for _, sr := range r.Steps {
		if c := sr.Compensation; c != nil {
			done = done || c.Status == StepDone
			failed = failed || c.Status == StepFailed
		}
	}
	return done, failed
}

// inDoubt reports whether the run stopped at a step whose outcome is in
// doubt.
func (r *Run) inDoubt() bool {
	for _, sr := range r.Steps {
		if sr.Name == r.FailedStep && sr.Status == StepFailed {
			return sr.InDoubt || sr.Fallback != nil && sr.Fallback.InDoubt
		}
	}
	return false
}

// placement says where an ended durable run's outcome goes, as a durable
// task's would: its answer to REACH_RESULTS — finished, rolled back by
// its compensations, or a business rejection — or the run parked: in
// REACH_REVIEW for a person when a step's outcome is in doubt, a
// compensation failed or the deadline passed; in REACH_DLQ when it can
// never succeed (poison) or failed otherwise.
func (r *Run) placement() (where, reason string) {
	compensated, compensationFailed := r.compensation()
	var code streams.Code
	if r.Error != nil {
		code = r.Error.Code
	}
	switch {
	case r.Status == RunFinished:
		return events.OutcomeResult, ""
	case r.inDoubt():
		return events.OutcomeReview, durable.ReasonInDoubt
	case compensationFailed:
		return events.OutcomeReview, ReasonCompensation
	case compensated:
		return events.OutcomeResult, ""
	case code == streams.CodeDeadlineExceeded:
		return events.OutcomeReview, durable.ReasonDeadline
	case code == streams.CodeBizReject:
		return events.OutcomeResult, ""
	case code == streams.CodeBadRequest || code == streams.CodePayloadTooLarge || code == streams.CodeLoopDetected:
		return events.OutcomeDeadLetter, durable.ReasonPoison
	}
	return events.OutcomeDeadLetter, durable.ReasonFailed
}

// failureBody is the body of a failed run's answer: the {"code",
// "message"} of every error reply, the step that failed and the steps
// whose compensations ran.
type failureBody struct {
	Code        streams.Code `json:"code"`
	Message     string       `json:"message"`
	RunID       string       `json:"run_id"`
	Step        string       `json:"step,omitempty"`
	Compensated []string     `json:"compensated,omitempty"`
}

// reply builds the run's answer in its content type: FINISHED with the
// output, or the failure with the failing step and its error. An answer
// larger than maxPayload is PAYLOAD_TOO_LARGE.
func (r *Run) reply(maxPayload int64) *nats.Msg {
	m := nats.NewMsg("")
	ct := r.ContentType
	if ct != streams.ContentTypeMsgpack {
		ct = streams.ContentTypeJSON
	}
	m.Header.Set(streams.HeaderContentType, ct)
	m.Header.Set(streams.HeaderRequestID, r.ID)
	m.Header.Set(HeaderRunID, r.ID)
	m.Header.Set(streams.HeaderOrchestrationID, r.OrchestrationID)
	m.Header.Set(streams.HeaderAttempt, "1")
	var err error
	if r.Status == RunFinished {
		m.Header.Set(streams.HeaderStatus, string(streams.StatusFinished))
		m.Data, err = r.answer(ct)
	} else {
		e := r.Error
		if e == nil {
			e = streams.NewError(streams.CodeInternal, "the run ended without an error")
		}
		m.Header.Set(streams.HeaderStatus, events.StatusOf(e))
		m.Header.Set(streams.HeaderError, string(e.Code))
		if r.inDoubt() {
			m.Header.Set(streams.HeaderInDoubt, "true")
		}
		body := failureBody{Code: e.Code, Message: e.Message, RunID: r.ID, Step: r.FailedStep}
		for _, sr := range r.Steps {
			if sr.Compensation != nil && sr.Compensation.Status == StepDone {
				body.Compensated = append(body.Compensated, sr.Name)
			}
		}
		m.Data, err = streams.Encode(ct, body)
	}
	if err == nil {
		err = streams.CheckSize(m, maxPayload)
	}
	if err != nil {
		e := streams.AsError(err)
		out := streams.ErrorReply("", ct, r.ID, streams.NewError(e.Code, "the answer of run %s: %s", r.ID, e.Message))
		out.Header.Set(HeaderRunID, r.ID)
		out.Header.Set(streams.HeaderOrchestrationID, r.OrchestrationID)
		return out
	}
	return m
}

// answer is a finished run's output in content type ct: as the run wrote
// it in JSON (null when it has none), or re-encoded in msgpack.
func (r *Run) answer(ct string) ([]byte, error) {
	if len(r.Output) == 0 {
		return streams.Encode(ct, nil)
	}
	if ct == streams.ContentTypeJSON {
		return r.Output, nil
	}
	dec := json.NewDecoder(bytes.NewReader(r.Output))
	dec.UseNumber() // integers too large for a float64 stay whole
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, streams.NewError(streams.CodeInternal, "the output: %v", err)
	}
	return streams.Encode(ct, plain(out))
}

// plain turns a tree's json.Numbers into int64 or float64, for an
// encoder that does not know them (msgpack would write them as strings).
func plain(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plain(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	}
	return v
}

// recordOutcome stores an ended durable run's outcome where Outcome says:
// its answer in REACH_RESULTS, or the original task parked in REACH_DLQ or
// REACH_REVIEW with the reason, the error and the run id. Both are
// deduplicated by message id; again (a redelivery) also looks the result
// up first, in case the duplicate window has passed.
func (e *Engine) recordOutcome(r *Run, msg jetstream.Msg, again bool) error {
	ctx, cancel := bounded()
	defer cancel()
	owner := r.owner(msg.Headers())
	if r.Outcome == events.OutcomeResult {
		subject := e.subjects.Result(owner, r.ID)
		if again {
			if _, err := e.results.GetLastMsgForSubject(ctx, subject); err == nil {
				return nil
			}
		}
		out := r.reply(e.nc.MaxPayload())
		out.Subject = subject
		out.Header.Set(streams.HeaderMsgID, "result-"+streams.SubmissionID(owner, r.ID))
		return e.publish(ctx, out)
	}
	subject := e.subjects.DeadLetter(r.Workflow)
	if r.Outcome == events.OutcomeReview {
		subject = e.subjects.Review(r.Workflow)
	}
	out := nats.NewMsg(subject)
	out.Data = msg.Data()
	for k, v := range msg.Headers() {
		out.Header[k] = v
	}
	// Like a parked task, a parked run keeps no signature (a replay is
	// signed anew: dispatcher.Replay).
	out.Header.Del(streams.HeaderSignature)
	out.Header.Del(streams.HeaderReplayedBy)
	err := r.Error
	if err == nil {
		err = streams.NewError(streams.CodeInternal, "the run ended without an error")
	}
	sends := 0
	for _, sr := range r.Steps {
		sends += sr.Sends
	}
	out.Header.Set(streams.HeaderDLQReason, r.Reason)
	out.Header.Set(streams.HeaderDLQAttempts, strconv.Itoa(sends))
	out.Header.Set(streams.HeaderError, string(err.Code))
	out.Header.Set(streams.HeaderStatus, string(streams.StatusFailed))
	out.Header.Set(streams.HeaderLastError, err.Message)
	out.Header.Set(HeaderRunID, r.ID)
	out.Header.Set(streams.HeaderMsgID, fmt.Sprintf("parked-%s-%d", streams.SubmissionID(owner, r.ID), r.Replays))
	return e.publish(ctx, out)
}

func (e *Engine) publish(ctx context.Context, m *nats.Msg) error {
	_, err := e.js.PublishMsg(ctx, m)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("publish %s: no JetStream ack in %v", m.Subject, recordTimeout)
	}
	return err
}

// recordDirect writes an ended direct-tier run's record to REACH_RUNS,
// without waiting for the write (the caller has its answer): a plain
// publish on the bucket's subject, which the server stores only if the key
// has no record (a durable run's id is never overwritten).
func (e *Engine) recordDirect(r *Run) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	m := nats.NewMsg("$KV." + streams.BucketRuns + "." + r.ID)
	m.Header.Set("Nats-Expected-Last-Subject-Sequence", "0")
	m.Data = b
	if int64(len(b)) > e.nc.MaxPayload()-1024 {
		return // too large to keep: the run's events say what it did
	}
	_ = e.nc.PublishMsg(m)
}

// reopen makes a parked run that was replayed (Reach-DLQ-Count replay)
// run again from its failed step, or its failed compensations.
func (e *Engine) reopen(r *Run, replay int) {
	_, compensationFailed := r.compensation()
	r.Replays = replay
	r.Status, r.Error, r.Outcome, r.Reason, r.Ended = RunRunning, nil, "", "", time.Time{}
	for _, sr := range r.Steps {
		if c := sr.Compensation; c != nil && c.Status == StepFailed {
			c.Status, c.Error = StepPending, nil
		}
		if sr.Status == StepFailed && !compensationFailed {
			sr.Status, sr.Error, sr.InDoubt, sr.Fallback, sr.Condition = StepPending, nil, false, nil, nil
		}
	}
	if compensationFailed {
		r.Status = RunCompensating
	} else {
		r.FailedStep = ""
	}
	e.decide(r, "", DecisionReopen, fmt.Sprintf("replay %d of the parked run: it runs again from where it failed", replay), nil)
}

// decide records a decision of run r, in its record and in REACH_EVENTS.
func (e *Engine) decide(r *Run, step, kind, detail string, cause *streams.Error) {
	now := time.Now()
	r.Decisions = append(r.Decisions, Decision{At: now, Step: step, Kind: kind, Detail: detail})
	id := r.ID
	if step != "" {
		id += "." + step
	}
	ev := events.Event{RequestID: id, OrchestrationID: r.OrchestrationID, Capability: r.Workflow, Tier: r.Tier,
		Kind: KindDecision, Status: string(streams.StatusFinished), Outcome: kind, Start: now, ParentID: r.ID}
	if cause != nil {
		ev.Status, ev.Code = events.StatusOf(cause), string(cause.Code)
	}
	e.event(r, ev)
}

// event records ev of run r: at once for a direct-tier run; for a durable
// one with the run's next record (write), so that a replica whose write
// loses to another's records none of the step outcomes and decisions it
// made meanwhile.
func (e *Engine) event(r *Run, ev events.Event) {
	if r.Tier != "durable" {
		e.d.RecordEvent(ev)
		return
	}
	r.pending = append(r.pending, ev)
}

// stepEvent records that step i of run r ended (done, failed, skipped or
// compensated) in REACH_EVENTS.
func (e *Engine) stepEvent(r *Run, i int) {
	sr := r.Steps[i]
	c := &sr.CallRun
	if sr.Status == StepCompensated {
		c = sr.Compensation
	}
	ev := events.Event{RequestID: r.ID + "." + sr.Name, OrchestrationID: r.OrchestrationID, Capability: r.Workflow,
		Tier: r.Tier, Kind: KindStep, Status: string(streams.StatusFinished), Outcome: string(sr.Status), Node: c.Node,
		Attempts: c.Attempts, LatencyMS: c.LatencyMS, Start: c.Started, ParentID: r.ID}
	if ev.Start.IsZero() {
		ev.Start = time.Now()
	}
	if sr.Error != nil && sr.Status != StepDone && sr.Status != StepCompensated {
		ev.Status, ev.Code = events.StatusOf(sr.Error), string(sr.Error.Code)
	}
	e.event(r, ev)
}

// runEvent records that run r ended, and where its answer went.
func (e *Engine) runEvent(r *Run) {
	sends := 0
	for _, sr := range r.Steps {
		sends += sr.Sends
	}
	ev := events.Event{RequestID: r.ID, OrchestrationID: r.OrchestrationID, Capability: r.Workflow, Tier: r.Tier,
		Kind: KindRun, Status: string(streams.StatusFinished), Outcome: r.Outcome, Attempts: sends, Start: r.Started,
		LatencyMS: float64(time.Since(r.Started).Microseconds()) / 1000, ParentID: r.ParentID}
	if r.Error != nil {
		ev.Status, ev.Code = events.StatusOf(r.Error), string(r.Error.Code)
	}
	e.d.RecordEvent(ev)
}

// owner returns the <source> token of a durable run's caller: the one its
// record names, or (a record written before runs named it) the one its
// task's headers h do; NoSource when neither does.
func (r *Run) owner(h nats.Header) string {
	if r.Source != "" {
		return r.Source
	}
	if s, err := streams.ResultSource(h.Get(streams.HeaderSource)); err == nil {
		return s
	}
	return streams.NoSource
}

// ownedBy reports whether the task whose headers are h belongs to run r:
// the same caller (a record that names none belongs to any).
func (r *Run) ownedBy(h nats.Header) bool {
	return r.Source == "" || r.Source == r.ownerOf(h)
}

// ownerOf is the <source> token of the task whose headers are h, or ""
// when its Reach-Source cannot be one.
func (r *Run) ownerOf(h nats.Header) string {
	s, err := streams.ResultSource(h.Get(streams.HeaderSource))
	if err != nil {
		return ""
	}
	return s
}

// foreignRun is the outcome of a durable task whose request id another
// caller's run holds (theirs): it is dead-lettered as BAD_REQUEST, named
// by its own caller, and the other run's record is neither read further
// nor written.
func foreignRun(theirs *Run, h nats.Header, name string, replay int) *Run {
	now := time.Now()
	r := &Run{ID: theirs.ID, Workflow: name, Tier: "durable", Source: theirs.ownerOf(h), Replays: replay,
		OrchestrationID: h.Get(streams.HeaderOrchestrationID), Started: now, Updated: now, Decisions: []Decision{}}
	if r.Source == "" {
		r.Source = streams.NoSource
	}
	r.fail(streams.NewError(streams.CodeBadRequest, "request id %s is another caller's workflow run: submit under another id", r.ID))
	r.Outcome, r.Reason = events.OutcomeDeadLetter, durable.ReasonPoison
	return r
}
