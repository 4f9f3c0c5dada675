package engine

import (
	"time"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// A wait queue (selection.WaitQueue) holds, in arrival order, the tasks of
// one capability that found every instance at its slot limit. A slot freed
// by this replica (settle), or an instance joining, hands them out oldest
// first (pump); a task that waits longer than QueueWait or past its
// deadline leaves with TARGET_BUSY or DEADLINE_EXCEEDED (giveUp). Like a
// pull consumer, a busy capability then sends work to whichever instance
// frees a slot first instead of guessing, and nothing waits behind a slow
// instance.

// queueKey names the queue t waits in: its capability's, or for a unicast
// task (Reach-Agent) its capability's at that instance, so that it never
// holds up tasks other instances could take.
func (t *Task) queueKey() string {
	if t.unicast != "" {
		return unicastKey(t.capability, t.unicast)
	}
	return t.capability
}

func unicastKey(capability, instance string) string { return capability + "@" + instance }

// waiting returns the queue named key, nil if there never was one.
func (en *Engine) waiting(key string) *selection.WaitQueue[*Task] {
	if q, ok := en.queues.Load(key); ok {
		return q.(*selection.WaitQueue[*Task])
	}
	return nil
}

func (en *Engine) queueOf(key string) *selection.WaitQueue[*Task] {
	return lookup(&en.queues, key, func() *selection.WaitQueue[*Task] { return new(selection.WaitQueue[*Task]) })
}

// enqueue makes t wait in q for a free slot, then hands out what it can.
func (en *Engine) enqueue(q *selection.WaitQueue[*Task], t *Task) {
	en.stats.queued.Add(1)
	wait := min(t.pol.QueueWait, time.Until(t.deadline))
	q.Push(&t.wait, t, wait, func() { en.giveUp(q, t, wait) })
	if e := t.stopped.Load(); e != nil {
		en.unqueue(q, t, e) // cancelled on its way into the queue
		return
	}
	en.pump(q) // a slot may have come free since route looked
}

// unqueue ends t's wait with e, unless pump or giveUp took it first.
func (en *Engine) unqueue(q *selection.WaitQueue[*Task], t *Task, e *streams.Error) {
	if q.Take(&t.wait) {
		t.done(t, nil, e)
	}
}

// pump sends waiting tasks, oldest first, while an instance has a free
// slot for them.
func (en *Engine) pump(q *selection.WaitQueue[*Task]) {
	for q.Len() > 0 {
		var inst *registry.Instance
		var probe bool
		var why NoRoute
		t, ok := q.Next(func(t *Task) bool {
			inst, probe, why = en.route(t)
			return why != RouteFull // still full: the next settle pumps again
		})
		if !ok {
			return
		}
		en.proceed(t, inst, probe, why)
	}
}

// giveUp ends t's wait for a slot, unless pump took it first.
func (en *Engine) giveUp(q *selection.WaitQueue[*Task], t *Task, waited time.Duration) {
	if !q.Take(&t.wait) {
		return
	}
	if time.Until(t.deadline) <= 0 {
		t.done(t, nil, streams.NewError(streams.CodeDeadlineExceeded, "the overall deadline passed while waiting for a free slot of %s", t.capability))
		return
	}
	if t.unicast != "" {
		t.done(t, nil, streams.NewError(streams.CodeTargetBusy, "instance %s had all its slots in use for %v", t.unicast, waited))
		return
	}
	t.done(t, nil, streams.NewError(streams.CodeTargetBusy, "every instance of %s had all its slots in use for %v", t.capability, waited))
}

// pumpOnChange hands waiting tasks to instances as they join or change,
// until done is closed.
func (en *Engine) pumpOnChange(done <-chan struct{}) {
	for {
		changed := en.table.Changed()
		en.queues.Range(func(_, q any) bool {
			if q := q.(*selection.WaitQueue[*Task]); q.Len() > 0 {
				en.pump(q)
			}
			return true
		})
		select {
		case <-done:
			return
		case <-changed:
		}
	}
}
