package engine

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/dispatcher/tracing"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// Stage 5 of a task's path, deliver: the task goes to the instance picked
// on reach.agent.<instance>, with a timer for its ACK; each ACKED or
// PROCESSING re-arms the timer for the call; the result, an error reply,
// the timer or the instance leaving ends the delivery, whichever claims it
// first, and settle (settle.go) takes it on. A hedge (hedge.go) is a second
// delivery of the same task; a cancel (cancel.go) ends them all.

// delivery is one attempt of a task at one instance.
type delivery struct {
	t       *Task
	inst    *registry.Instance
	load    *selection.Load
	probe   bool
	hedge   bool // the second delivery of a hedged task
	attempt int  // the task's attempt number of this delivery
	sent    time.Time
	token   string // the last token of its reply subject

	mu      sync.Mutex
	over    bool // claimed by whatever ended it
	acked   bool
	chunks  int       // CHUNK messages it sent (stream.go)
	expires time.Time // when the timer may end it
	timer   *time.Timer
	span    trace.Span // nil unless its task's span records (dispatcher/tracing)
}

// claim ends dl for the caller; it reports false when dl had ended already.
func (dl *delivery) claim() bool {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.over {
		return false
	}
	dl.over = true
	if dl.timer != nil {
		dl.timer.Stop()
	}
	return true
}

// send delivers t to inst, with a timer for the ACK.
func (en *Engine) send(t *Task, inst *registry.Instance, probe, hedge bool) {
	t.mu.Lock()
	dl := &delivery{t: t, inst: inst, load: en.loads.Of(inst.ID), probe: probe, attempt: t.attempts, hedge: hedge} // pick reserved the slot
	t.mu.Unlock()
	if e := t.stopped.Load(); e != nil { // cancelled on its way here: the slot goes back unused
		dl.load.Inflight.Add(-1)
		en.Freed(inst)
		if !hedge {
			t.done(t, nil, e)
		}
		return
	}
	// A direct-tier request's own headers are reused: nothing reads the
	// caller's values of the headers set here once the task has started. A
	// durable task keeps its original headers for parking, and a task that
	// may be hedged gives each delivery its own, as two may be sent at once.
	h := t.req.Header
	if t.seq > 0 || t.hedge != nil {
		h = make(nats.Header, len(t.req.Header)+7)
		for k, v := range t.req.Header {
			h[k] = v
		}
	}
	dl.token = en.inbox.Token()
	out := &nats.Msg{Subject: en.cfg.Subjects.Agent(inst.ID), Reply: en.inbox.Open(dl.token, dl), Data: t.req.Data, Header: h}
	// The caller's signature proves the task to the dispatchers only: an
	// agent holding it could send the task again as its caller. Nor does a
	// parked copy keep it (park): a replay is signed anew.
	out.Header.Del(streams.HeaderSignature)
	out.Header.Set(streams.HeaderCapability, t.capability)
	out.Header.Set(streams.HeaderRequestID, t.requestID)
	out.Header.Set(streams.HeaderOrchestrationID, t.orchID)
	out.Header.Set(streams.HeaderHops, strconv.Itoa(t.hops))
	out.Header.Set(streams.HeaderAttempt, strconv.Itoa(dl.attempt))
	out.Header.Set(streams.HeaderDeadline, strconv.FormatInt(t.deadline.UnixMilli(), 10))
	out.Header.Set(streams.HeaderVisits, strings.Join(append(slices.Clip(t.visits), inst.ID), ","))
	if t.relay != nil {
		out.Header.Set(streams.HeaderStream, "1")
	} else {
		out.Header.Del(streams.HeaderStream) // nobody would read its chunks
	}
	if en.offersDirect(t) {
		out.Header.Set(streams.HeaderReplyTo, t.req.Reply)
	} else {
		out.Header.Del(streams.HeaderReplyTo)
	}
	en.traceDelivery(dl, out.Header)
	if err := streams.CheckSize(out, en.nc.MaxPayload()); err != nil {
		e := streams.AsError(err)
		e.Message = "the delivery to " + inst.ID + ", with the dispatcher's headers: " + e.Message
		en.end(dl, nil, nil, e, OutcomeFinal)
		return
	}
	t.log.Debug().Str("node", inst.ID).Int("attempt", dl.attempt).Bool("hedge", hedge).Str("state", string(streams.StatusSent)).Msg("task state")
	t.mu.Lock()
	t.open = append(t.open, dl) // before the publish: a reply may settle dl at once
	t.mu.Unlock()
	// The lock is held across the publish and the arming of the timer, so a
	// reply or the timer handles dl only once both are done (and whatever
	// the next attempt writes into the shared header map comes after this
	// publish has read it). From the unlock on, t belongs to whoever claims
	// dl: its timer, its reply, or its instance leaving.
	dl.mu.Lock()
	err := en.nc.PublishMsg(out)
	if err == nil {
		dl.sent = time.Now()
		wait := min(t.pol.AckTimeout, t.deadline.Sub(dl.sent))
		dl.expires = dl.sent.Add(wait)
		dl.timer = time.AfterFunc(wait, func() { en.expire(dl) })
	} else {
		dl.over = true
	}
	dl.mu.Unlock()
	if err != nil {
		en.settle(dl, nil, nil, streams.NewError(streams.CodeInternal, "deliver to %s: %v", inst.ID, err), OutcomeUnreachable)
		return
	}
	if e := t.stopped.Load(); e != nil {
		en.cancelDelivery(dl, e) // cancelled while it was being sent
		return
	}
	if t.hedge != nil && !hedge {
		en.armHedge(t, dl)
	}
}

// offersDirect reports whether t's deliveries offer agents the caller's
// reply subject (Reach-Reply-To): on the direct tier, when the caller
// waits for a reply and Config.RelayResults is off.
func (en *Engine) offersDirect(t *Task) bool {
	// A task that may be hedged answers through the dispatcher: only it can
	// let one of two deliveries' results through, and say Reach-Hedged.
	// A streamed one too: its chunks and result come through in order.
	return !en.cfg.RelayResults && t.seq == 0 && t.req.Reply != "" && t.hedge == nil && t.relay == nil
}

// onReply handles one reply to a delivery, on the inbox's goroutine.
func (en *Engine) onReply(dl *delivery, m *nats.Msg) {
	if m.Header.Get("Status") == "503" {
		dl.load.MarkAbsent(dl.inst)
		en.end(dl, nil, nil, streams.NewError(streams.CodeTimeout, "instance %s has no subscription", dl.inst.ID), OutcomeUnreachable)
		return
	}
	status := streams.Status(m.Header.Get(streams.HeaderStatus))
	mine := dl.load.Inflight.Load()
	if status.Terminal() {
		mine-- // the agent no longer counts this task
	}
	dl.load.NoteActive(m.Header.Get(streams.HeaderActive), mine)
	switch status {
	case streams.StatusChunk:
		en.onChunk(dl, m)
		return
	case streams.StatusAcked, streams.StatusProcessing:
		dl.mu.Lock()
		if !dl.over {
			dl.acked = true
			wait := min(en.CallTimeout(dl.t, dl.inst), time.Until(dl.t.deadline))
			dl.expires = time.Now().Add(wait)
			dl.timer.Reset(wait)
		}
		dl.mu.Unlock()
		dl.t.log.Debug().Str("node", dl.inst.ID).Str("state", string(status)).Msg("task state")
		return
	case streams.StatusFinished:
		if m.Header.Get(streams.HeaderDirect) != "" && !en.offersDirect(dl.t) {
			en.end(dl, nil, m, streams.NewError(streams.CodeInternal, "instance %s sent its result elsewhere (%s), but the delivery offered no %s",
				dl.inst.ID, streams.HeaderDirect, streams.HeaderReplyTo), OutcomeFinal)
			return
		}
		if dl.t.relay != nil {
			if e := checkChunks(dl, m); e != nil {
				en.end(dl, nil, m, e, OutcomeFinal)
				return
			}
		}
		en.end(dl, m, m, nil, OutcomeDone)
		return
	}
	e := streams.ErrorFromMessage(m)
	if e == nil {
		e = streams.NewError(streams.CodeInternal, "instance %s answered status %q without an error code", dl.inst.ID, m.Header.Get(streams.HeaderStatus))
	}
	kind := OutcomeFinal
	switch e.Code {
	case streams.CodeTargetBusy:
		kind = OutcomeBusy
	case streams.CodeTimeout:
		kind = OutcomeSlow
	case streams.CodeNoAgent, streams.CodeCancelled:
		// The instance does not serve the capability (its record is stale
		// or wrong), or dropped a delivery nobody cancelled: like an
		// unreachable one, another instance may take it.
		kind = OutcomeUnreachable
	}
	en.end(dl, nil, m, e, kind)
}

// CallTimeout is how long a delivery of t to inst may take after an ACK
// or PROCESSING: the caller's Reach-Timeout and inst's type's learned
// hint, plus slack, clamped by the capability's policy.
func (en *Engine) CallTimeout(t *Task, inst *registry.Instance) time.Duration {
	return t.pol.CallTimeout(t.wish, en.hints.TimeoutHint(inst.Entry()))
}

// expire ends a delivery whose ACK or result did not come in time.
func (en *Engine) expire(dl *delivery) {
	dl.mu.Lock()
	if dl.over {
		dl.mu.Unlock()
		return
	}
	if left := time.Until(dl.expires); left > 0 { // an ACK re-armed the timer, or a chunk moved expires on (stream.go)
		if dl.chunks > 0 {
			dl.timer.Reset(left)
		}
		dl.mu.Unlock()
		return
	}
	dl.over = true
	acked := dl.acked
	dl.mu.Unlock()
	en.notifyCancel(dl) // whatever the instance still does for it, nobody will use
	id := dl.inst.ID
	switch {
	case time.Until(dl.t.deadline) <= 0:
		en.settle(dl, nil, nil, streams.NewError(streams.CodeDeadlineExceeded, "instance %s did not finish before the overall deadline", id), OutcomeFinal)
	case !acked:
		en.settle(dl, nil, nil, streams.NewError(streams.CodeTimeout, "instance %s sent no ACK within %v", id, dl.t.pol.AckTimeout), OutcomeUnreachable)
	default:
		en.settle(dl, nil, nil, streams.NewError(streams.CodeTimeout, "instance %s acknowledged but sent no result in time", id), OutcomeSlow)
	}
}

// end claims dl and settles it, unless whatever ended it first did.
func (en *Engine) end(dl *delivery, res, last *nats.Msg, e *streams.Error, kind Outcome) {
	if dl.claim() {
		en.settle(dl, res, last, e, kind)
	}
}

// abandon ends the deliveries to an instance that left the table, so their
// tasks go elsewhere at once.
func (en *Engine) abandon(id string) {
	for _, dl := range en.inbox.All() {
		if dl.inst.ID != id {
			continue
		}
		en.end(dl, nil, nil, streams.NewError(streams.CodeTimeout, "instance %s left the registry before answering", id), OutcomeUnreachable)
	}
}

// traceDelivery starts dl's span, the child of its task's, and writes its
// context into the delivery's headers h (tracing.Delivery).
func (en *Engine) traceDelivery(dl *delivery, h nats.Header) {
	if dl.t.span != nil {
		dl.span = tracing.Delivery(dl.t.span, h, en.cfg.Subjects.Agent("{instance}"), dl.inst.ID, dl.inst.Entry().Type, dl.attempt, dl.hedge)
	}
}
