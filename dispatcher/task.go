package dispatcher

import (
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// task is one request travelling through the dispatcher.
type task struct {
	req         *nats.Msg
	capability  string
	requestID   string
	orchID      string
	affinity    string
	unicast     string
	contentType string
	hops        int
	wish        time.Duration // caller's Reach-Timeout
	deadline    time.Time
	attempts    int
	triedIDs    []string
	node        string // the instance that produced the outcome
	log         zerolog.Logger
}

func (t *task) tried(id string) bool {
	for _, x := range t.triedIDs {
		if x == id {
			return true
		}
	}
	return false
}

// newTask reads a request's headers, filling in what the caller left out.
func (d *Dispatcher) newTask(m *nats.Msg) (*task, *streams.Error) {
	h := m.Header
	if h == nil {
		h = nats.Header{}
		m.Header = h
	}
	t := &task{
		req:         m,
		capability:  d.cfg.Subjects.CapabilityFromTask(m.Subject),
		requestID:   h.Get(streams.HeaderRequestID),
		orchID:      h.Get(streams.HeaderOrchestrationID),
		affinity:    h.Get(streams.HeaderAffinityKey),
		unicast:     h.Get(streams.HeaderAgent),
		contentType: streams.ContentType(h, m.Data),
	}
	if t.requestID == "" {
		t.requestID = uuid.NewString()
	}
	if t.orchID == "" {
		t.orchID = t.requestID
	}
	t.log = d.log.With().Str("request_id", t.requestID).Str("capability", t.capability).Logger()
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
	if t.contentType != streams.ContentTypeJSON && t.contentType != streams.ContentTypeMsgpack {
		return t, streams.NewError(streams.CodeBadRequest, "unsupported content type %q", t.contentType)
	}
	hops, err := intHeader(h, streams.HeaderHops)
	if err != nil {
		return t, err
	}
	t.hops = int(hops) + 1
	if t.hops > d.cfg.MaxHops {
		return t, streams.NewError(streams.CodeLoopDetected, "%d hops exceed the limit of %d", t.hops, d.cfg.MaxHops)
	}
	wish, err := intHeader(h, streams.HeaderTimeout)
	if err != nil {
		return t, err
	}
	t.wish = time.Duration(wish) * time.Millisecond
	dl, err := intHeader(h, streams.HeaderDeadline)
	if err != nil {
		return t, err
	}
	if dl > 0 {
		t.deadline = time.UnixMilli(dl)
		if time.Until(t.deadline) <= 0 {
			return t, streams.NewError(streams.CodeDeadlineExceeded, "the deadline passed before dispatch")
		}
	} else {
		t.deadline = time.Now().Add(d.cfg.Deadline)
	}
	return t, nil
}

func intHeader(h nats.Header, k string) (int64, *streams.Error) {
	v := h.Get(k)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, streams.NewError(streams.CodeBadRequest, "header %s must be a non-negative integer, got %q", k, v)
	}
	return n, nil
}

// handle takes one task from receipt to reply.
func (d *Dispatcher) handle(m *nats.Msg) {
	t, e := d.newTask(m)
	if e == nil {
		var res *nats.Msg
		res, e = d.route(t)
		if e == nil && d.reply(t, res) {
			d.stats.finished.Add(1)
			t.log.Debug().Str("node", t.node).Int("attempts", t.attempts).Msg("task finished")
			return
		}
	}
	if e == nil {
		return
	}
	d.stats.failed.Add(1)
	t.log.Debug().Str("code", string(e.Code)).Str("error", e.Message).Int("attempts", t.attempts).Msg("task failed")
	d.replyError(m, t.requestID, t.orchID, e, t.attemptHeaders()...)
}

// route delivers t to instances until one produces an outcome: a result, an
// error that is not worth another instance, or no instance left to try.
func (d *Dispatcher) route(t *task) (*nats.Msg, *streams.Error) {
	var last *streams.Error
	for t.attempts < d.cfg.MaxAttempts {
		if time.Until(t.deadline) <= 0 {
			return nil, streams.NewError(streams.CodeDeadlineExceeded, "overall deadline passed after %d attempts", t.attempts)
		}
		inst := d.resolve(t)
		if inst == nil {
			break
		}
		t.attempts++
		t.node = inst.ID
		res, e, retry := d.attempt(t, inst)
		if e == nil {
			return res, nil
		}
		last = e
		if !retry {
			return nil, e
		}
		t.triedIDs = append(t.triedIDs, inst.ID)
		d.stats.redirected.Add(1)
		t.log.Debug().Str("node", inst.ID).Str("code", string(e.Code)).Str("error", e.Message).Msg("trying another instance")
	}
	if last != nil {
		return nil, last
	}
	if t.unicast != "" {
		return nil, streams.NewError(streams.CodeNoAgent, "instance %q is not routable for %s", t.unicast, t.capability)
	}
	return nil, streams.NewError(streams.CodeNoAgent, "no routable instance offers %s", t.capability)
}

// resolve picks the next instance for t, or nil.
func (d *Dispatcher) resolve(t *task) *registry.Instance {
	if t.unicast != "" {
		inst, ok := d.table.Lookup(t.unicast)
		if !ok || t.tried(inst.ID) {
			return nil
		}
		if e := inst.Entry(); !e.Routable() || !e.Has(t.capability) {
			return nil
		}
		return inst
	}
	rs := d.table.Candidates(t.capability)
	if rs.Len() == 0 {
		return nil
	}
	name, ok := d.cfg.Strategies[t.capability]
	if !ok {
		name = d.cfg.DefaultStrategy
	}
	if i := strategies[name](d, t.capability, rs, t); i >= 0 {
		return rs.Instances[i]
	}
	return nil
}

// attempt delivers t to inst and follows it to an outcome. retry reports
// whether another instance should get the task.
func (d *Dispatcher) attempt(t *task, inst *registry.Instance) (res *nats.Msg, e *streams.Error, retry bool) {
	load := d.loadOf(inst.ID)
	load.inflight.Add(1)
	defer load.inflight.Add(-1)

	reply, ch := d.inbox.open()
	defer d.inbox.close(reply)
	out := &nats.Msg{Subject: d.cfg.Subjects.Agent(inst.ID), Reply: reply, Data: t.req.Data, Header: nats.Header{}}
	for k, v := range t.req.Header {
		out.Header[k] = v
	}
	out.Header.Set(streams.HeaderCapability, t.capability)
	out.Header.Set(streams.HeaderRequestID, t.requestID)
	out.Header.Set(streams.HeaderOrchestrationID, t.orchID)
	out.Header.Set(streams.HeaderHops, strconv.Itoa(t.hops))
	out.Header.Set(streams.HeaderAttempt, strconv.Itoa(t.attempts))
	out.Header.Set(streams.HeaderDeadline, strconv.FormatInt(t.deadline.UnixMilli(), 10))
	if err := streams.CheckSize(out, d.nc.MaxPayload()); err != nil {
		return nil, streams.AsError(err), false
	}
	sent := time.Now()
	if err := d.nc.PublishMsg(out); err != nil {
		return nil, streams.NewError(streams.CodeInternal, "deliver to %s: %v", inst.ID, err), !errors.Is(err, nats.ErrConnectionClosed)
	}

	status := streams.StatusSent
	timer := time.NewTimer(min(d.cfg.AckTimeout, time.Until(t.deadline)))
	defer timer.Stop()
	for {
		select {
		case m := <-ch:
			if m.Header.Get("Status") == "503" {
				return nil, streams.NewError(streams.CodeNoAgent, "instance %s has no subscription", inst.ID), true
			}
			switch streams.Status(m.Header.Get(streams.HeaderStatus)) {
			case streams.StatusAcked, streams.StatusProcessing:
				status = streams.StatusProcessing
				timer.Reset(min(callTimeout(t.wish, inst.Entry().TimeoutHint()), time.Until(t.deadline)))
			case streams.StatusFinished:
				now := time.Now()
				load.observe(now.Sub(sent), now)
				return m, nil, false
			default:
				e := streams.ErrorFromMessage(m)
				if e == nil {
					e = streams.NewError(streams.CodeInternal, "instance %s answered status %q without an error code", inst.ID, m.Header.Get(streams.HeaderStatus))
				}
				return nil, e, e.Code == streams.CodeTargetBusy
			}
		case <-timer.C:
			if time.Until(t.deadline) <= 0 {
				return nil, streams.NewError(streams.CodeDeadlineExceeded, "instance %s did not finish before the overall deadline", inst.ID), false
			}
			now := time.Now()
			load.observe(now.Sub(sent), now) // a timeout is the slowest answer
			if status == streams.StatusSent {
				return nil, streams.NewError(streams.CodeTimeout, "instance %s sent no ACK within %v", inst.ID, d.cfg.AckTimeout), true
			}
			return nil, streams.NewError(streams.CodeTimeout, "instance %s acknowledged but sent no result in time", inst.ID), false
		}
	}
}

func (t *task) attemptHeaders() []string {
	h := []string{streams.HeaderAttempt, strconv.Itoa(t.attempts)}
	if t.node != "" {
		h = append(h, streams.HeaderNode, t.node)
	}
	return h
}

// reply sends an instance's result to the caller with the dispatcher's
// headers; it reports false (after answering with an error) when the result
// no longer fits the server's max_payload.
func (d *Dispatcher) reply(t *task, res *nats.Msg) bool {
	out := &nats.Msg{Subject: t.req.Reply, Data: res.Data, Header: res.Header}
	out.Header.Set(streams.HeaderRequestID, t.requestID)
	out.Header.Set(streams.HeaderOrchestrationID, t.orchID)
	out.Header.Set(streams.HeaderAttempt, strconv.Itoa(t.attempts))
	if err := streams.CheckSize(out, d.nc.MaxPayload()); err != nil {
		d.stats.failed.Add(1)
		d.replyError(t.req, t.requestID, t.orchID, streams.NewError(streams.CodePayloadTooLarge, "result of %s: %v", t.node, err), t.attemptHeaders()...)
		return false
	}
	if err := d.nc.PublishMsg(out); err != nil {
		t.log.Warn().Err(err).Msg("reply to caller failed")
	}
	return true
}

// replyError answers a request with an error code; kv are extra header pairs.
func (d *Dispatcher) replyError(m *nats.Msg, requestID, orchID string, e *streams.Error, kv ...string) {
	out := streams.ErrorReply(m.Reply, streams.ContentType(m.Header, m.Data), requestID, e)
	if orchID != "" {
		out.Header.Set(streams.HeaderOrchestrationID, orchID)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Header.Set(kv[i], kv[i+1])
	}
	if err := d.nc.PublishMsg(out); err != nil {
		d.log.Warn().Err(err).Str("request_id", requestID).Msg("error reply failed")
	}
}
