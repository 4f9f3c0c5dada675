package engine

import (
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/streams"
)

// Cancellation. A task is cancelled when nobody will use its answer: its
// caller said so on reach.cancel, or an in-process caller's context ended
// (dispatcher.Call). The task then ends with that error wherever it is — delivered,
// waiting for a slot, or backing off before a retry — and the instance
// working on it gets a CANCEL (docs/protocol.md, Cancellation), which it may ignore: an answer
// that still arrives is dropped. The dispatcher also sends a CANCEL when it
// gives up on a delivery itself (no ACK, no result in time, the deadline
// passed), because the instance's work is wasted from then on.
//
// A task belongs to whatever holds it — its open delivery (claimed once), its
// place in a wait queue (under the queue's lock) or its backoff timer (the
// waiting flag) — and cancel takes it from there. Between those places a
// task checks its stopped error at each step (run, send, enqueue, retry),
// so a cancel that finds it in transit ends it at the next one.

// Cancel ends t with e as soon as possible. Calling it again, or after t
// ended, does nothing.
func (en *Engine) Cancel(t *Task, e *streams.Error) {
	if !t.stopped.CompareAndSwap(nil, e) {
		return
	}
	t.mu.Lock()
	open := slices.Clone(t.open)
	t.mu.Unlock()
	for _, dl := range open {
		en.cancelDelivery(dl, e)
	}
	en.takeFromBackoff(t, e)
	if q := en.waiting(t.queueKey()); q != nil {
		en.unqueue(q, t, e)
	}
}

// cancelDelivery ends an open delivery with e, telling its instance.
func (en *Engine) cancelDelivery(dl *delivery, e *streams.Error) {
	if dl.claim() {
		en.notifyCancel(dl)
		en.settle(dl, nil, nil, e, OutcomeFinal)
	}
}

// takeFromBackoff ends t with e if a backoff timer holds it.
func (en *Engine) takeFromBackoff(t *Task, e *streams.Error) {
	if t.waiting.CompareAndSwap(true, false) {
		en.backoffs.Delete(t)
		t.done(t, nil, e)
	}
}

// notifyCancel tells dl's instance that its work for dl is no longer
// wanted: a message without reply subject, Reach-Status CANCEL, naming the
// task, the attempt and the delivery (its reply subject).
func (en *Engine) notifyCancel(dl *delivery) {
	m := nats.NewMsg(en.cfg.Subjects.Agent(dl.inst.ID))
	m.Header.Set(streams.HeaderStatus, string(streams.StatusCancel))
	m.Header.Set(streams.HeaderRequestID, dl.t.requestID)
	m.Header.Set(streams.HeaderAttempt, strconv.Itoa(dl.attempt))
	m.Header.Set(streams.HeaderCapability, dl.t.capability)
	m.Header.Set(streams.HeaderDelivery, en.inbox.Subject(dl.token))
	if err := en.nc.PublishMsg(m); err != nil {
		dl.t.log.Debug().Err(err).Str("node", dl.inst.ID).Msg("cancel not sent")
	}
}

// OnCancel handles a caller's cancel on reach.cancel: every direct-tier
// task of this replica with that request id ends CANCELLED. Durable tasks
// are not cancelled this way: they end in a recorded outcome. With an
// authorizer the cancel must prove its Reach-Source, and only tasks of that
// caller end.
func (en *Engine) OnCancel(m *nats.Msg) {
	id := m.Header.Get(streams.HeaderRequestID)
	if streams.ValidateInstanceID(id) != nil {
		en.log.Debug().Str("request_id", id).Msg("cancel without a valid request id ignored")
		return
	}
	// With an authorizer a cancel is a caller's request like a task: signed
	// by its Reach-Source, and it stops only that identity's own tasks.
	source := ""
	if en.hooks.Authorizer != nil {
		if e := en.hooks.Authorizer.Authorize("", m, false); e != nil {
			en.log.Debug().Str("request_id", id).Str("source", m.Header.Get(streams.HeaderSource)).Str("reason", e.Message).Msg("cancel refused")
			return
		}
		source = m.Header.Get(streams.HeaderSource)
	}
	e := streams.NewError(streams.CodeCancelled, "cancelled by the caller")
	for _, t := range en.tasksWithID(id) {
		if t.source != source {
			t.log.Debug().Str("source", source).Msg("cancel by another identity than the task's caller ignored")
			continue
		}
		t.log.Debug().Msg("task cancelled by the caller")
		en.Cancel(t, e)
	}
	if en.hooks.Shared != nil {
		en.hooks.Shared(id, source, e) // a broadcast's (dispatcher.Shared)
	}
}

// tasksWithID finds this replica's direct-tier tasks with request id id:
// those with an open delivery, waiting for a slot, or backing off. It scans
// them (cancels are rare), so tasks carry no index of their own.
func (en *Engine) tasksWithID(id string) []*Task {
	var found []*Task
	seen := make(map[*Task]bool)
	add := func(t *Task) {
		if t.requestID == id && t.seq == 0 && !seen[t] {
			seen[t] = true
			found = append(found, t)
		}
	}
	for _, dl := range en.inbox.All() {
		add(dl.t)
	}
	en.backoffs.Range(func(k, _ any) bool {
		add(k.(*Task))
		return true
	})
	en.queues.Range(func(_, v any) bool {
		v.(*selection.WaitQueue[*Task]).Range(add)
		return true
	})
	return found
}
