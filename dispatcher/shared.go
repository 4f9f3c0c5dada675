package dispatcher

import (
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/engine"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/dispatcher/tracing"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// A shared delivery asks many instances of one capability at once for one
// request (dispatcher/fanout's broadcast): the request is decoded, admitted
// and matched once, like a task of its own, and the instances it may go to
// are resolved once, each with a slot reserved. The caller of OpenShared
// publishes the deliveries, gathers their replies on one inbox and keeps
// their timers; it reports each one's end with Settle, so breakers,
// penalties, observed latency and the slots count it as they count a
// task's delivery, and gives the rest back with Close.

// Shared is one request's shared delivery. Its methods other than Settle
// and Note are for the goroutine that opened it; Settle and Note for
// different targets may run concurrently.
type Shared struct {
	d       *Dispatcher
	t       *engine.Task
	caller  string
	targets []sharedTarget
	closed  bool
	cancel  func(*streams.Error) // OnCancel's
}

// sharedKey finds an open shared delivery by its dispatcher and request id,
// for a caller's cancel (engine.OnCancel): shared deliveries are few and short, so
// they live in one map of the package rather than in every Dispatcher.
type sharedKey struct {
	d  *Dispatcher
	id string
}

var openShared sync.Map // sharedKey → *Shared, while OnCancel's f is set

// OnCancel has f called, once, when the request's caller cancels it on
// reach.cancel (its Reach-Request-Id; with an authorizer only from the
// caller the request proved). f must not block. Close ends it.
func (s *Shared) OnCancel(f func(*streams.Error)) {
	s.cancel = f
	openShared.Store(sharedKey{s.d, s.t.RequestID()}, s)
}

// cancelShared hands a caller's cancel of request id to the shared
// delivery open under it, if any; source is the cancel's proven caller.
func (d *Dispatcher) cancelShared(id, source string, e *streams.Error) {
	v, ok := openShared.Load(sharedKey{d, id})
	if !ok {
		return
	}
	s := v.(*Shared)
	if s.t.Source() != source {
		s.t.Log().Debug().Str("source", source).Msg("cancel by another identity than the broadcast's caller ignored")
		return
	}
	if openShared.CompareAndDelete(sharedKey{d, id}, s) {
		s.t.Log().Debug().Msg("broadcast cancelled by the caller")
		s.cancel(e)
	}
}

type sharedTarget struct {
	inst  *registry.Instance
	load  *selection.Load
	probe bool
}

// OpenShared decodes req as a task of capability would be — ids, content
// type, requirements (Reach-Require over the policy's), hops, visits,
// deadline, the caller proven by the authorizer — takes one of the
// replica's in-flight slots (the caller's fair share) and the capability's
// own, checks the payload against the input schemas, and resolves the
// instances a delivery may go to: routable, meeting the requirements, not
// visited MaxVisits times by this chain, known to be subscribed, and
// admitted by their breaker. Each gets one of its slots counted, without
// waiting for one to be free: a shared delivery asks every instance once.
// When none qualifies it returns NO_AGENT (or CIRCUIT_OPEN, LOOP_DETECTED)
// saying why, and nothing is held. Close must follow a nil error.
func (d *Dispatcher) OpenShared(capability string, req *nats.Msg) (*Shared, *streams.Error) {
	start := time.Now()
	if req.Header == nil {
		req.Header = nats.Header{}
	}
	if d.Table() == nil {
		return nil, streams.NewError(streams.CodeInternal, "dispatcher %s is not started", d.cfg.Name)
	}
	caller := engine.CallerOf(req.Header)
	if e := d.eng.Admit(caller); e != nil {
		return nil, e
	}
	t, e := d.eng.NewTask(req, capability, start, false)
	s := &Shared{d: d, t: t, caller: caller}
	if e == nil {
		e = d.eng.StartShared(t) // a shared delivery asks every instance
	}
	if e == nil {
		e = s.resolve()
	}
	if e != nil {
		s.Close()
		return nil, e
	}
	d.eng.TraceTask(t)
	return s, nil
}

// resolve picks every instance of the capability that may take the task,
// reserving one slot of each.
func (s *Shared) resolve() *streams.Error {
	d, t := s.d, s.t
	rs := d.eng.Matching(t, d.table.Candidates(t.Capability()))
	now := time.Now()
	var open, looped int
	for i := 0; i < rs.Len(); i++ {
		inst := rs.Instances[i]
		l := d.eng.Load(inst.ID)
		switch {
		case t.VisitsOf(inst.ID) >= d.cfg.MaxVisits:
			looped++
			continue
		case l.Absent(inst) || t.Refused(inst.Entry().Type):
			continue
		}
		if over, _ := t.TooSlow(l, now); over {
			continue
		}
		admit, probe := l.Breaker.Allow(now, t.Policy().Breaker)
		if !admit {
			open++
			t.Pass(streams.Exclusion{Node: inst.ID, Reason: "breaker open"})
			continue
		}
		l.Inflight.Add(1)
		s.targets = append(s.targets, sharedTarget{inst: inst, load: l, probe: probe})
	}
	if len(s.targets) > 0 {
		return nil
	}
	why := engine.RouteNoAgent
	switch {
	case open > 0:
		why = engine.RouteOpen
	case looped > 0:
		why = engine.RouteLooped
	}
	return why.Error(d.eng, t)
}

// Len is the number of targets.
func (s *Shared) Len() int { return len(s.targets) }

// Target is the instance id of target i.
func (s *Shared) Target(i int) string { return s.targets[i].inst.ID }

// RequestID is the request's id (given or made up); OrchestrationID its
// orchestration's.
func (s *Shared) RequestID() string { return s.t.RequestID() }

// OrchestrationID is the request's orchestration id.
func (s *Shared) OrchestrationID() string { return s.t.OrchID() }

// Capability is what the request calls.
func (s *Shared) Capability() string { return s.t.Capability() }

// ContentType is the request's payload type.
func (s *Shared) ContentType() string { return s.t.ContentType() }

// Deadline is the request's overall deadline.
func (s *Shared) Deadline() time.Time { return s.t.Deadline() }

// AckTimeout is how long a delivery may wait for its ACK (the capability's
// policy), at most until the deadline.
func (s *Shared) AckTimeout() time.Duration {
	return min(s.t.Policy().AckTimeout, time.Until(s.t.Deadline()))
}

// CallTimeout is how long target i may take after an ACK or PROCESSING:
// the request's Reach-Timeout and i's type's learned hint, plus slack,
// clamped by the policy, at most until the deadline.
func (s *Shared) CallTimeout(i int) time.Duration {
	return min(s.d.eng.CallTimeout(s.t, s.targets[i].inst), time.Until(s.t.Deadline()))
}

// Header returns the headers every delivery carries: the request's own as
// decoded (less its signature, which proves the request to dispatchers
// only), with the dispatcher's Reach-Capability, Reach-Hops,
// Reach-Attempt 1 and Reach-Deadline set. Each call returns a new map; the
// caller sets what differs per target (Reach-Request-Id, Reach-Visits
// with Visits) before each publish.
func (s *Shared) Header() nats.Header {
	t := s.t
	h := make(nats.Header, len(t.Request().Header)+8)
	for k, v := range t.Request().Header {
		h[k] = v
	}
	h.Del(streams.HeaderSignature)
	h.Del(streams.HeaderAgent)
	h.Del(streams.HeaderStream)
	h.Del(streams.HeaderReplyTo)
	h.Del(streams.HeaderQuorum)
	h.Set(streams.HeaderCapability, t.Capability())
	h.Set(streams.HeaderOrchestrationID, t.OrchID())
	h.Set(streams.HeaderHops, strconv.Itoa(t.Hops()))
	h.Set(streams.HeaderAttempt, "1")
	h.Set(streams.HeaderDeadline, strconv.FormatInt(t.Deadline().UnixMilli(), 10))
	if t.Span() != nil {
		tracing.Inject(t.Span(), h)
	}
	return h
}

// Visits is the Reach-Visits value of a delivery to target i: the chain's
// visits so far and i.
func (s *Shared) Visits(i int) string {
	id := s.targets[i].inst.ID
	if len(s.t.Visits()) == 0 {
		return id
	}
	b := make([]byte, 0, 64)
	for _, v := range s.t.Visits() {
		b = append(append(b, v...), ',')
	}
	return string(append(b, id...))
}

// Note takes the load an agent reports in a reply from target i
// (Reach-Active), and marks it absent on a no-responders status.
func (s *Shared) Note(i int, m *nats.Msg) {
	tg := &s.targets[i]
	if m.Header.Get("Status") == "503" {
		tg.load.MarkAbsent(tg.inst)
		return
	}
	mine := tg.load.Inflight.Load()
	if streams.Status(m.Header.Get(streams.HeaderStatus)).Terminal() {
		mine--
	}
	tg.load.NoteActive(m.Header.Get(streams.HeaderActive), mine)
}

// Settle counts how the delivery to target i ended — a result (e nil), an
// agent's error reply (reply set), or the gatherer's own finding (reply
// nil: TIMEOUT, with acked saying whether an ACK came; CANCELLED or
// DEADLINE_EXCEEDED when nobody needs it any more) — in its breaker,
// penalty and latency as a task's delivery is counted, and gives its slot
// back. took is the time since it was sent. Call it once per target.
func (s *Shared) Settle(i int, took time.Duration, reply *nats.Msg, e *streams.Error, acked bool) {
	tg := &s.targets[i]
	kind := engine.OutcomeDone
	if e != nil {
		kind = engine.OutcomeFinal
		switch {
		case e.Code == streams.CodeTargetBusy:
			kind = engine.OutcomeBusy
		case e.Code == streams.CodeTimeout && (reply != nil || acked):
			kind = engine.OutcomeSlow
		case e.Code == streams.CodeTimeout, reply != nil && (e.Code == streams.CodeNoAgent || e.Code == streams.CodeCancelled):
			kind = engine.OutcomeUnreachable
		}
	}
	s.d.eng.Count(tg.inst, tg.load, tg.probe, s.t.Policy(), kind, e, time.Now(), took)
	s.d.eng.Freed(tg.inst)
}

// Candidates is how many instances offer the capability here (for the
// records).
func (s *Shared) Candidates() int { return s.d.Table().Candidates(s.t.Capability()).Len() }

// Close gives back the request's slots and ends its span, with e (nil:
// it succeeded). Calling it again does nothing.
func (s *Shared) Close(e ...*streams.Error) {
	if s.closed {
		return
	}
	s.closed = true
	if s.cancel != nil {
		openShared.CompareAndDelete(sharedKey{s.d, s.t.RequestID()}, s)
	}
	s.t.Finish()
	var err *streams.Error
	if len(e) > 0 {
		err = e[0]
	}
	tracing.End(s.t.Span(), err)
	s.d.eng.Free(s.caller)
	s.d.eng.Done()
}
