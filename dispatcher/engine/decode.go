package engine

import (
	"time"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry/declare"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Stage 2 of a task's path, decode: a request's headers and payload are
// read once, into the task every later stage reads. Its content type and
// validity are decided here and carried with it; a malformed request ends
// BAD_REQUEST (or LOOP_DETECTED, UNAUTHORIZED, DEADLINE_EXCEEDED) before
// anything is resolved.

// NewTask reads a request's headers, filling in what the caller left out:
// the request id (a fresh UUID), the orchestration id (the request id) and
// the deadline (defaultDeadline). The task starts at start; it is a
// durable one with durable.
func (en *Engine) NewTask(m *nats.Msg, capability string, start time.Time, durable bool) (*Task, *streams.Error) {
	h := m.Header
	if h == nil {
		h = nats.Header{}
		m.Header = h
	}
	t := &Task{
		req:        m,
		capability: capability,
		affinity:   h.Get(streams.HeaderAffinityKey),
		unicast:    h.Get(streams.HeaderAgent),
		pol:        en.Policy(capability),
		start:      start,
	}
	defaultDeadline := start.Add(t.pol.Deadline)
	if durable {
		defaultDeadline = start.Add(en.cfg.DurableDeadline)
	}
	t.requestID, t.orchID = TaskIDs(h)

	ct, badPayload := streams.PayloadType(h, m.Data)
	t.contentType = ct
	t.log = TaskLog{base: &en.log, t: t}
	if e := en.readRequirements(t, h); e != nil {
		return t, e
	}
	if err := streams.ValidateCapability(t.capability); err != nil {
		return t, streams.NewError(streams.CodeBadRequest, "%v", err)
	}
	if err := streams.ValidateInstanceID(t.requestID); err != nil {
		return t, streams.NewError(streams.CodeBadRequest, "%s: %v", streams.HeaderRequestID, err)
	}
	if t.unicast != "" {
		if err := streams.ValidateInstanceID(t.unicast); err != nil {
			return t, streams.NewError(streams.CodeBadRequest, "%s: %v", streams.HeaderAgent, err)
		}
	}
	if badPayload != nil {
		return t, badPayload
	}
	// Every delivery says what its payload is, so no agent needs the
	// sniffing rule.
	h.Set(streams.HeaderContentType, t.contentType)
	hops, err := streams.ParseCount(h, streams.HeaderHops)
	if err != nil {
		return t, err
	}
	t.hops = int(min(hops, int64(en.cfg.MaxHops))) + 1
	if hops >= int64(en.cfg.MaxHops) {
		return t, streams.NewError(streams.CodeLoopDetected, "%s %d: one more hop exceeds the limit of %d", streams.HeaderHops, hops, en.cfg.MaxHops)
	}
	wish, err := streams.ParseCount(h, streams.HeaderTimeout)
	if err != nil {
		return t, err
	}
	t.wish = time.Duration(min(wish, int64(t.pol.MaxCall/time.Millisecond))) * time.Millisecond
	if t.budget, err = streams.ParseBudget(h); err != nil {
		return t, err
	}
	if t.visits, err = streams.ParseVisits(h); err != nil {
		return t, err
	}
	if en.hooks.Authorizer != nil {
		if e := en.hooks.Authorizer.Authorize(t.capability, m, durable); e != nil {
			return t, e
		}
		t.source = h.Get(streams.HeaderSource)
	} else {
		// Unproven without auth, Reach-Source still reaches the agent once,
		// as Get reads it: no other spelling or value for a reader that
		// folds case or takes the last one (the authorizer refuses those).
		streams.KeepOne(h, streams.HeaderSource)
	}
	if durable {
		// Its result is published under its caller's name: the proven
		// identity, or without auth the Reach-Source as sent (or "_").
		owner, err := streams.ResultSource(h.Get(streams.HeaderSource))
		if err != nil {
			return t, streams.NewError(streams.CodeBadRequest, "%v", err)
		}
		t.owner = owner
	}
	if t.pol.Write && h.Get(streams.HeaderIdempotencyKey) == "" {
		h.Set(streams.HeaderIdempotencyKey, t.requestID)
	}
	dl, err := streams.ParseDeadline(h)
	if err != nil {
		return t, err
	}
	if !dl.IsZero() {
		t.deadline = dl
		if time.Until(t.deadline) <= 0 {
			return t, streams.NewError(streams.CodeDeadlineExceeded, "the deadline passed before dispatch")
		}
	} else {
		t.deadline = defaultDeadline
	}
	return t, nil
}

// TaskIDs returns a request's id and orchestration id, filling in what the
// caller left out: a fresh UUID, and the request id.
func TaskIDs(h nats.Header) (requestID, orchID string) {
	requestID, orchID = h.Get(streams.HeaderRequestID), h.Get(streams.HeaderOrchestrationID)
	if requestID == "" {
		requestID = streams.NewRequestID()
	}
	if orchID == "" {
		orchID = requestID
	}
	return requestID, orchID
}

// parsedRequirement is a cached parse of a Reach-Require value.
type parsedRequirement struct {
	req declare.Requirement
	err *streams.Error
}

// maxRequirements bounds the distinct Reach-Require values whose parse is
// cached; beyond it the cache starts afresh.
const maxRequirements = 1024

// readRequirements sets t's requirement — the caller's Reach-Require over
// its capability's default — and its preference, or says what is wrong.
func (en *Engine) readRequirements(t *Task, h nats.Header) *streams.Error {
	need := t.pol.Require
	if v := h.Get(streams.HeaderRequire); v != "" {
		p, ok := en.requirements.Load(v)
		if !ok {
			r, err := declare.ParseRequirement([]byte(v))
			pr := &parsedRequirement{req: r}
			if err != nil {
				pr.err = streams.NewError(streams.CodeBadRequest, "header %s: %v", streams.HeaderRequire, err)
			}
			en.requirements.Store(v, pr)
			p = pr
		}
		pr := p.(*parsedRequirement)
		if pr.err != nil {
			return pr.err
		}
		need = declare.Merge(need, pr.req)
	}
	if !need.Empty() {
		t.need, t.needKey = need, need.Key()
	}
	switch v := h.Get(streams.HeaderPrefer); v {
	case "", selection.PreferLatency, selection.PreferCost, selection.PreferQuality:
		t.prefer = v
	default:
		return streams.NewError(streams.CodeBadRequest, "header %s %q: want %s, %s or %s", streams.HeaderPrefer, v, selection.PreferLatency, selection.PreferCost, selection.PreferQuality)
	}
	return nil
}
