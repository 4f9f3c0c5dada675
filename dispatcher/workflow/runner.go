package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
	"github.com/agent-reach/agentreach/streams"
)

// How a run runs. A runner takes a run from where its record says — every
// step not done or skipped yet, or the compensations of a run that is
// compensating — to its end, or to the point where it must stop: a durable
// step that found no capacity (the run waits in REACH_TASKS), the engine
// draining or closing, or the record moving on under it (another replica
// owns the run). A durable run's record is written before each task is
// sent, so a run resumed elsewhere knows which task's outcome is unknown
// and sends it again with the same idempotency key: an idempotent agent
// replays instead of executing twice.
//
// Idempotency keys of a durable run's tasks: a step's <run-id>.<step>, a
// parallel step's branch <run-id>.<step>.<branch>, a fallback
// <run-id>.<step>.fallback, a compensation <run-id>.<step>.compensate
// (which a direct-tier run's compensations carry too; see key).

// stop says how execute ended.
type stop int

const (
	stepEnded   stop = iota // the run has ended: its Status is final
	stepWait                // durable: no capacity; the run waits in the stream
	stepStopped             // the engine drains or closes: the run goes back unrecorded
	stepLost                // another replica owns the run
)

// runner runs one run.
type runner struct {
	e       *Engine
	r       *Run
	header  nats.Header // the request that started the run
	scope   *spec.Scope
	ctx     context.Context // the run's deadline, and the engine's Close
	cancel  context.CancelFunc
	durable bool
}

// newRun reads a request for workflow name into a new run. A request that
// cannot run returns the run (to answer with) and the error.
func (e *Engine) newRun(h nats.Header, data []byte, name string, submitted time.Time, tier string) (*Run, *streams.Error) {
	if h == nil {
		h = nats.Header{}
	}
	now := time.Now()
	r := &Run{ID: h.Get(streams.HeaderRequestID), Workflow: name, Tier: tier, Status: RunRunning,
		OrchestrationID: h.Get(streams.HeaderOrchestrationID), ParentID: h.Get(streams.HeaderParentID),
		Started: now, Updated: now, Decisions: []Decision{}, Owner: e.d.Name(), Input: json.RawMessage("null")}
	if r.ID == "" {
		r.ID = streams.NewRequestID()
	}
	if r.OrchestrationID == "" {
		r.OrchestrationID = r.ID
	}
	ct, badPayload := streams.PayloadType(h, data)
	r.ContentType = ct
	v, ok := (*e.defs.Load())[name]
	if !ok {
		return r, streams.NewError(streams.CodeNoAgent, "workflow %s is not defined (any more)", name)
	}
	r.def, r.Version, r.Definition = v.def, v.revision, v.json
	for _, st := range v.def.Steps {
		r.Steps = append(r.Steps, &StepRun{Name: st.Name, Status: StepPending})
	}
	base := e.d.Config().Deadline
	if tier == "durable" {
		base = e.d.Config().DurableDeadline
	}
	r.Deadline = submitted.Add(base)
	if err := streams.ValidateInstanceID(r.ID); err != nil {
		return r, streams.NewError(streams.CodeBadRequest, "%s: %v", streams.HeaderRequestID, err)
	}
	if tier == "durable" {
		source, err := streams.ResultSource(h.Get(streams.HeaderSource))
		if err != nil {
			return r, streams.NewError(streams.CodeBadRequest, "%v", err)
		}
		r.Source = source
	}
	if badPayload != nil {
		return r, badPayload
	}
	dl, e2 := streams.ParseDeadline(h)
	if e2 != nil {
		return r, e2
	}
	if !dl.IsZero() {
		r.Deadline = dl
	}
	if !now.Before(r.Deadline) {
		return r, streams.NewError(streams.CodeDeadlineExceeded, "the deadline passed before the run started")
	}
	params, err := v.def.ParamsFor(h.Get(spec.HeaderParams))
	if err != nil {
		return r, streams.NewError(streams.CodeBadRequest, "%v", err)
	}
	r.Params = params
	input, e3 := spec.DecodeBody(ct, data)
	if e3 != nil {
		return r, e3
	}
	r.Input = input
	return r, nil
}

// runnerOf prepares r to run: its scope rebuilt from the record (a
// resumed run's results), its context bounded by the run's deadline.
// header is the request's that started the run.
func (e *Engine) runnerOf(r *Run, header nats.Header, durable bool) *runner {
	scope := spec.NewScope(r.Input, r.Params) // JSON: read from the request, or from the record
	x := &runner{e: e, r: r, header: header, durable: durable, scope: scope}
	for _, sr := range r.Steps {
		switch sr.Status {
		case StepDone, StepCompensated:
			scope.SetResult(sr.Name, sr.Result)
		case StepSkipped:
			scope.SetMissing(sr.Name, "was skipped: "+sr.Skipped)
		}
	}
	x.ctx, x.cancel = context.WithDeadline(e.ctx, r.Deadline)
	return x
}

// release frees the runner's context.
func (x *runner) release() { x.cancel() }

// persist writes a durable run's record; nothing on the direct tier.
func (x *runner) persist() error {
	if !x.durable {
		return nil
	}
	x.r.Updated = time.Now()
	return x.e.write(x.r)
}

// persisted is persist, turned into how execute stops when it fails.
func (x *runner) persisted() (stop, bool) {
	err := x.persist()
	if err == nil {
		return 0, true
	}
	if errors.Is(err, errLostRun) {
		x.e.log.Info().Str("request_id", x.r.ID).Msg("durable run taken over by another replica: left to it")
		return stepLost, false
	}
	x.e.log.Warn().Err(err).Str("request_id", x.r.ID).Msg("durable run's record not written: it goes back to the stream")
	return stepStopped, false
}

// stopping reports whether the run must stop before its next task: the
// engine closes, or (durable) drains.
func (x *runner) stopping() bool {
	return x.e.closing() || x.durable && x.e.draining.Load()
}

// execute runs the run to its end or to where it must stop.
func (x *runner) execute() stop {
	r, def := x.r, x.r.def
	if r.Status == RunCompensating {
		return x.compensate(def.StepIndex(r.FailedStep))
	}
	r.Status = RunRunning
	for i, st := range def.Steps {
		sr := r.Steps[i]
		if sr.Status == StepDone || sr.Status == StepSkipped {
			continue
		}
		if x.stopping() {
			return stepStopped
		}
		if !time.Now().Before(r.Deadline) {
			return x.abort(i, streams.NewError(streams.CodeDeadlineExceeded, "the run's deadline passed before step %s", st.Name))
		}
		if st.When != nil {
			run, e := x.decideWhen(i)
			if e != nil {
				if s, done := x.failed(i, e, false); done {
					return s
				}
				continue
			}
			if !run {
				continue
			}
		}
		if s, done := x.runStep(i); done {
			return s
		}
	}
	out, err := def.BuildOutput(x.scope)
	if err != nil {
		r.FailedStep = ""
		return x.end(streams.NewError(streams.CodeBadRequest, "output: %v", err))
	}
	r.Output = out
	return x.end(nil)
}

// decideWhen evaluates step i's condition (once: a resumed run keeps the
// recorded value) and reports whether the step runs; a false condition
// skips it. A condition that cannot be evaluated is the step's failure.
func (x *runner) decideWhen(i int) (bool, *streams.Error) {
	st, sr := x.r.def.Steps[i], x.r.Steps[i]
	if sr.Condition == nil {
		var trace strings.Builder
		ok, err := st.When.Eval(x.scope, "when", &trace)
		if err != nil {
			return false, streams.NewError(streams.CodeBadRequest, "step %s: %v", st.Name, err)
		}
		sr.Condition = &ConditionRun{Text: st.When.String(), Value: ok, Trace: trace.String()}
		kind := DecisionWhenFalse
		if ok {
			kind = DecisionWhenTrue
		}
		x.e.decide(x.r, st.Name, kind, trace.String(), nil)
	}
	if !sr.Condition.Value {
		x.skip(i, "its condition is false")
	}
	return sr.Condition.Value, nil
}

// skip marks step i skipped: it has no result.
func (x *runner) skip(i int, why string) {
	sr := x.r.Steps[i]
	sr.Status, sr.Skipped = StepSkipped, why
	x.scope.SetMissing(sr.Name, "was skipped: "+why)
	x.e.stepEvent(x.r, i)
}

// runStep runs step i: its call (or parallel group), and on failure what
// its on_failure says. It reports whether execute must stop, and how.
func (x *runner) runStep(i int) (stop, bool) {
	st, sr := x.r.def.Steps[i], x.r.Steps[i]
	in, err := st.BuildInput(x.scope)
	if err != nil {
		return x.failed(i, streams.NewError(streams.CodeBadRequest, "step %s: input: %v", st.Name, err), false)
	}
	sr.Input = in
	if sr.Fallback != nil && sr.Fallback.Status != StepDone {
		return x.fallback(i, in) // the step failed before a wait or a crash: its fallback goes on
	}
	sr.Status, sr.Error = StepRunning, nil
	sr.Capability = st.Call
	if st.Parallel != nil {
		sr.Capability = ""
	}
	sr.Sends++
	sr.Started = time.Now()
	if s, ok := x.persisted(); !ok {
		return s, true
	}
	var res json.RawMessage
	var e *streams.Error
	if st.Parallel != nil {
		res, e = x.parallel(st, in, sr)
	} else {
		res, e = x.call(st.Call, in, x.key(st.Name), time.Duration(st.TimeoutMS)*time.Millisecond, x.r.Deadline, &sr.CallRun)
	}
	if x.e.closing() {
		return stepStopped, true // the engine closed under it: nothing recorded, resumed elsewhere
	}
	if e != nil {
		return x.failed(i, e, true)
	}
	x.done(i, res)
	return 0, false
}

// done records step i's result (JSON, as call or parallel returned it).
func (x *runner) done(i int, res json.RawMessage) {
	sr := x.r.Steps[i]
	sr.Status, sr.Error = StepDone, nil
	sr.Result = res
	x.scope.SetResult(sr.Name, res)
	x.e.stepEvent(x.r, i)
}

// failed handles a failure of step i: e is why; sent says whether the
// step's task went out (a failure before — its condition, its input —
// has no fallback: the fallback would get the same input).
func (x *runner) failed(i int, e *streams.Error, sent bool) (stop, bool) {
	st, sr := x.r.def.Steps[i], x.r.Steps[i]
	sr.Error = e
	action := st.Action()
	switch {
	case sent && x.durable && waitsForCapacity(e.Code) && action == spec.ActionAbort:
		// Like a durable task: while nothing can take it, the run waits.
		sr.Status = StepPending
		x.wait(st.Name, sr.Capability, e)
		return stepWait, true
	case sr.InDoubt && action != spec.ActionSkip:
		return x.stopInDoubt(i, sr.Capability, e), true
	case action == spec.ActionSkip:
		x.e.decide(x.r, st.Name, DecisionSkip, fmt.Sprintf("step %s failed (%s: %s): on_failure skips it", st.Name, e.Code, e.Message), e)
		x.skip(i, "it failed: "+string(e.Code))
		return 0, false
	case action == spec.ActionFallback && sent:
		in, _ := st.BuildInput(x.scope) // it was built for the step's own task
		return x.fallback(i, in)
	}
	return x.abort(i, e), true
}

// fallback calls step i's fallback with the step's input.
func (x *runner) fallback(i int, in json.RawMessage) (stop, bool) {
	st, sr := x.r.def.Steps[i], x.r.Steps[i]
	fb := sr.Fallback
	if fb == nil {
		fb = &CallRun{Capability: st.OnFailure.Fallback}
		sr.Fallback = fb
		x.e.decide(x.r, st.Name, DecisionFallback, fmt.Sprintf("step %s failed (%s: %s): calling its fallback %s",
			st.Name, sr.Error.Code, sr.Error.Message, fb.Capability), sr.Error)
	}
	fb.Status = StepRunning
	fb.Sends++
	fb.Started = time.Now()
	if s, ok := x.persisted(); !ok {
		return s, true
	}
	res, e := x.call(fb.Capability, in, x.key(st.Name+".fallback"), time.Duration(st.TimeoutMS)*time.Millisecond, x.r.Deadline, fb)
	if x.e.closing() {
		return stepStopped, true
	}
	if e == nil {
		fb.Status = StepDone
		sr.Capability = fb.Capability
		x.done(i, res)
		return 0, false
	}
	fb.Status, fb.Error = StepFailed, e
	if fb.InDoubt {
		return x.stopInDoubt(i, fb.Capability, e), true
	}
	if x.durable && waitsForCapacity(e.Code) {
		fb.Status = StepPending
		x.wait(st.Name, fb.Capability, e)
		return stepWait, true
	}
	return x.abort(i, e), true
}

// wait records that step's task to capability found no capacity (e says
// why) and the run waits in REACH_TASKS — once per wait: the deliveries
// that find no capacity again add nothing.
func (x *runner) wait(step, capability string, e *streams.Error) {
	if n := len(x.r.Decisions); n > 0 && x.r.Decisions[n-1].Step == step && x.r.Decisions[n-1].Kind == DecisionWait {
		return
	}
	x.e.decide(x.r, step, DecisionWait, fmt.Sprintf("no capacity for %s (%s: %s): the run waits in %s",
		capability, e.Code, e.Message, streams.StreamTasks), e)
}

// stopInDoubt ends the run at step i, whose task to capability has an
// outcome in doubt: it may or may not have happened, so neither a fallback
// nor compensation is safe. A person decides (REACH_REVIEW).
func (x *runner) stopInDoubt(i int, capability string, e *streams.Error) stop {
	st, sr := x.r.def.Steps[i], x.r.Steps[i]
	sr.Status, sr.Error = StepFailed, e
	x.r.FailedStep = st.Name
	x.e.stepEvent(x.r, i)
	x.e.decide(x.r, st.Name, DecisionAbort, fmt.Sprintf("the outcome of %s is in doubt (%s): the run stops, nothing is compensated", capability, e.Message), e)
	return x.end(x.stepError(st, e))
}

// abort ends the run at step i with e; a critical step's failure first
// compensates the steps done before it.
func (x *runner) abort(i int, e *streams.Error) stop {
	st, sr := x.r.def.Steps[i], x.r.Steps[i]
	sr.Status, sr.Error = StepFailed, e
	x.r.FailedStep = st.Name
	x.r.Error = x.stepError(st, e)
	x.e.stepEvent(x.r, i)
	if !st.Critical {
		x.e.decide(x.r, st.Name, DecisionAbort, fmt.Sprintf("step %s failed (%s: %s): the run ends", st.Name, e.Code, e.Message), e)
		return x.end(x.r.Error)
	}
	todo := 0
	for j := range i {
		if x.r.def.Steps[j].Compensate != "" && x.r.Steps[j].Status == StepDone {
			todo++
		}
	}
	x.e.decide(x.r, st.Name, DecisionAbort, fmt.Sprintf("critical step %s failed (%s: %s): the run ends after %d compensations",
		st.Name, e.Code, e.Message, todo), e)
	return x.compensate(i)
}

// compensate undoes, in reverse order, the steps done before step failed
// that have a compensate capability, then ends the run. A compensation
// that fails is recorded and the others still run; the run then goes to
// review.
func (x *runner) compensate(failed int) stop {
	r := x.r
	r.Status = RunCompensating
	for j := failed - 1; j >= 0; j-- {
		st, sr := r.def.Steps[j], r.Steps[j]
		if st.Compensate == "" || sr.Status != StepDone {
			continue
		}
		if x.stopping() {
			return stepStopped
		}
		c := sr.Compensation
		if c == nil {
			c = &CallRun{Capability: st.Compensate}
			sr.Compensation = c
			x.e.decide(x.r, st.Name, DecisionCompensate, fmt.Sprintf("undoing step %s with %s", st.Name, st.Compensate), nil)
		}
		if c.Status == StepFailed {
			continue // recorded: it went to review
		}
		c.Status = StepRunning
		c.Sends++
		c.Started = time.Now()
		if s, ok := x.persisted(); !ok {
			return s
		}
		payload, err := json.Marshal(map[string]any{"run_id": r.ID, "workflow": r.Workflow, "step": st.Name,
			"input": sr.Input, "result": sr.Result})
		if err != nil {
			payload = json.RawMessage("null") // the recorded input and result are JSON: it cannot fail
		}
		_, e := x.call(st.Compensate, payload, r.ID+"."+st.Name+".compensate", 0,
			time.Now().Add(x.e.cfg.CompensationTimeout), c)
		if x.e.closing() {
			return stepStopped
		}
		switch {
		case e == nil:
			c.Status = StepDone
			sr.Status = StepCompensated
			x.e.stepEvent(x.r, j)
		case x.durable && waitsForCapacity(e.Code):
			c.Status = StepPending
			x.wait(st.Name, st.Compensate, e)
			return stepWait
		default:
			c.Status, c.Error = StepFailed, e
			x.e.decide(x.r, st.Name, DecisionCompensate, fmt.Sprintf("the compensation %s of step %s failed (%s: %s): the run goes to review",
				st.Compensate, st.Name, e.Code, e.Message), e)
		}
	}
	return x.end(r.Error)
}

// end ends the run: finished without e, failed with it.
func (x *runner) end(e *streams.Error) stop {
	r := x.r
	r.Ended = time.Now()
	if e == nil {
		r.Status, r.Error = RunFinished, nil
		return stepEnded
	}
	r.Status, r.Error = RunFailed, e
	return stepEnded
}

// stepError is a failed step's error as the run reports it.
func (x *runner) stepError(st *spec.Step, e *streams.Error) *streams.Error {
	return &streams.Error{Code: e.Code, Message: "step " + st.Name + ": " + strings.TrimPrefix(e.Message, "step "+st.Name+": "), Excluded: e.Excluded}
}

// key is the idempotency key of a durable run's task: <run-id>.<what>,
// the same however often the task is sent. A direct-tier run sends no
// task twice, so its steps' tasks carry only the key the dispatcher gives
// every write (their request id): a keyed task costs an idempotent agent
// two KV round trips, which a direct run would pay on every step for
// nothing. Compensations are keyed on both tiers (compensate).
func (x *runner) key(what string) string {
	if !x.durable {
		return ""
	}
	return x.r.ID + "." + what
}

// taskMsg builds the task of one call: a request id of its own, the run's
// orchestration id as Reach-Orchestration-Id, the run id as
// Reach-Parent-Id, deadline and idempotency key (none when key is ""), and
// what travels across hops from the run's request.
func (x *runner) taskMsg(payload json.RawMessage, key string, timeout time.Duration, deadline time.Time) *nats.Msg {
	m := nats.NewMsg("")
	m.Data = payload
	m.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	m.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
	m.Header.Set(streams.HeaderOrchestrationID, x.r.OrchestrationID)
	m.Header.Set(streams.HeaderParentID, x.r.ID)
	m.Header.Set(streams.HeaderDeadline, strconv.FormatInt(deadline.UnixMilli(), 10))
	if key != "" {
		m.Header.Set(streams.HeaderIdempotencyKey, key)
	}
	for _, k := range []string{streams.HeaderTraceParent, streams.HeaderSource, streams.HeaderHops, streams.HeaderVisits} {
		if v := x.header.Get(k); v != "" {
			m.Header.Set(k, v)
		}
	}
	if timeout > 0 {
		m.Header.Set(streams.HeaderTimeout, strconv.FormatInt(timeout.Milliseconds(), 10))
	}
	return m
}

// call sends one task to capability through the dispatcher, in this
// process, and records how it went in c; it returns the result as JSON.
func (x *runner) call(capability string, payload json.RawMessage, key string, timeout time.Duration, deadline time.Time, c *CallRun) (json.RawMessage, *streams.Error) {
	ctx, cancel := context.WithDeadline(x.e.ctx, deadline)
	defer cancel()
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout+config.CallTimeoutSlack)
		defer cancel()
	}
	start := time.Now()
	reply := x.e.d.Call(ctx, capability, x.taskMsg(payload, key, timeout, deadline), dispatcher.ToCapability())
	c.Ended = time.Now()
	c.LatencyMS = float64(c.Ended.Sub(start).Microseconds()) / 1000
	c.Node = reply.Header.Get(streams.HeaderNode)
	c.Attempts += int(streams.IntHeader(reply.Header, streams.HeaderAttempt))
	if e := streams.ErrorFromMessage(reply); e != nil {
		c.Error = e
		c.InDoubt = reply.Header.Get(streams.HeaderInDoubt) == "true"
		return nil, e
	}
	v, e := spec.DecodeBody(streams.ContentType(reply.Header, reply.Data), reply.Data)
	if e != nil {
		e = streams.NewError(streams.CodeInternal, "the result of %s from %s: %s", capability, c.Node, e.Message)
		c.Error = e
		return nil, e
	}
	c.Error = nil
	return v, nil
}

// parallel runs a parallel step's branches as a fan-out does, and returns
// the results of those that succeeded by branch name, or INCOMPLETE when
// its completion policy was not met.
func (x *runner) parallel(st *spec.Step, in json.RawMessage, sr *StepRun) (json.RawMessage, *streams.Error) {
	p := st.Parallel
	deadline := x.r.Deadline
	jobs := make([]fanout.Job, len(p.Branches))
	maxWait := time.Duration(p.MaxWaitMS) * time.Millisecond
	for i, b := range p.Branches {
		payload, err := b.BuildInput(x.scope, in)
		if err != nil {
			return nil, streams.NewError(streams.CodeBadRequest, "step %s: branch %s: input: %v", st.Name, b.Name, err)
		}
		timeout := time.Duration(b.TimeoutMS) * time.Millisecond
		jobs[i] = fanout.Job{Name: b.Name, Capability: b.Call, Timeout: timeout,
			Msg: x.taskMsg(payload, x.key(st.Name+"."+b.Name), timeout, deadline)}
		if p.MaxWaitMS == 0 {
			maxWait = max(maxWait, timeout)
		}
	}
	if left := time.Until(deadline); maxWait == 0 || maxWait > left {
		maxWait = left
	}
	start := time.Now()
	rep := fanout.Gather(x.ctx, x.e.d, jobs, p.Mode, p.QuorumRule(), maxWait, streams.ContentTypeJSON, dispatcher.ToCapability())
	sr.Ended = time.Now()
	sr.LatencyMS = float64(sr.Ended.Sub(start).Microseconds()) / 1000
	results := map[string]json.RawMessage{}
	sr.Branches, sr.Missing = nil, rep.Missing
	for _, br := range rep.Replies {
		sr.Attempts += br.Attempts
		if br.Error == nil {
			results[br.Name] = json.RawMessage("null") // a result that is no JSON
			if json.Valid(br.Result) {
				results[br.Name] = json.RawMessage(br.Result)
			}
		}
		br.Result = nil // kept once, in the step's result
		sr.Branches = append(sr.Branches, br)
	}
	if !rep.Complete {
		e := streams.NewError(streams.CodeIncomplete, "%s", rep.Message)
		sr.Error = e
		return nil, e
	}
	out, err := json.Marshal(results) // the results are valid JSON: it cannot fail
	if err != nil {
		return nil, streams.NewError(streams.CodeInternal, "step %s: its results: %v", st.Name, err)
	}
	return out, nil
}

// waitsForCapacity reports whether a durable run's step that failed with
// c waits, as a durable task does: nothing can take it now.
func waitsForCapacity(c streams.Code) bool {
	switch c {
	case streams.CodeNoAgent, streams.CodeCircuitOpen, streams.CodeTargetBusy, streams.CodeOverloaded:
		return true
	}
	return false
}
