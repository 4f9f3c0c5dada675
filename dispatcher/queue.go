package dispatcher

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
func (t *task) queueKey() string {
	if t.unicast != "" {
		return unicastKey(t.capability, t.unicast)
	}
	return t.capability
}

func unicastKey(capability, instance string) string { return capability + "@" + instance }

// waiting returns the queue named key, nil if there never was one.
func (d *Dispatcher) waiting(key string) *selection.WaitQueue[*task] {
	if q, ok := d.queues.Load(key); ok {
		return q.(*selection.WaitQueue[*task])
	}
	return nil
}

func (d *Dispatcher) queueOf(key string) *selection.WaitQueue[*task] {
	return lookup(&d.queues, key, func() *selection.WaitQueue[*task] { return new(selection.WaitQueue[*task]) })
}

// enqueue makes t wait in q for a free slot, then hands out what it can.
func (d *Dispatcher) enqueue(q *selection.WaitQueue[*task], t *task) {
	d.stats.queued.Add(1)
	wait := min(t.pol.QueueWait, time.Until(t.deadline))
	q.Push(&t.wait, t, wait, func() { d.giveUp(q, t, wait) })
	if e := t.stopped.Load(); e != nil {
		d.unqueue(q, t, e) // cancelled on its way into the queue
		return
	}
	d.pump(q) // a slot may have come free since route looked
}

// unqueue ends t's wait with e, unless pump or giveUp took it first.
func (d *Dispatcher) unqueue(q *selection.WaitQueue[*task], t *task, e *streams.Error) {
	if q.Take(&t.wait) {
		t.done(t, nil, e)
	}
}

// pump sends waiting tasks, oldest first, while an instance has a free
// slot for them.
func (d *Dispatcher) pump(q *selection.WaitQueue[*task]) {
	for q.Len() > 0 {
		var inst *registry.Instance
		var probe bool
		var why noRoute
		t, ok := q.Next(func(t *task) bool {
			inst, probe, why = d.route(t)
			return why != routeFull // still full: the next settle pumps again
		})
		if !ok {
			return
		}
		d.proceed(t, inst, probe, why)
	}
}

// giveUp ends t's wait for a slot, unless pump took it first.
func (d *Dispatcher) giveUp(q *selection.WaitQueue[*task], t *task, waited time.Duration) {
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
func (d *Dispatcher) pumpOnChange(done <-chan struct{}) {
	for {
		changed := d.table.Changed()
		d.queues.Range(func(_, q any) bool {
			if q := q.(*selection.WaitQueue[*task]); q.Len() > 0 {
				d.pump(q)
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
