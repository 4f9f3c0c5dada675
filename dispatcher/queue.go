package dispatcher

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-reach/agentreach/streams"
)

// waitQueue holds, in arrival order, the tasks of one capability that found
// every instance at its slot limit. A slot freed by this replica (settle),
// or an instance joining, hands them out oldest first (pump); a task that
// waits longer than QueueWait or past its deadline leaves with TARGET_BUSY
// or DEADLINE_EXCEEDED (giveUp). Like a pull consumer, a busy capability
// then sends work to whichever instance frees a slot first instead of
// guessing, and nothing waits behind a slow instance.
type waitQueue struct {
	mu    sync.Mutex
	tasks list.List    // of *task
	n     atomic.Int64 // tasks.Len(), readable without mu
}

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
func (d *Dispatcher) waiting(key string) *waitQueue {
	if q, ok := d.queues.Load(key); ok {
		return q.(*waitQueue)
	}
	return nil
}

func (d *Dispatcher) queueOf(key string) *waitQueue {
	return lookup(&d.queues, key, func() *waitQueue { return &waitQueue{} })
}

// enqueue makes t wait in q for a free slot, then hands out what it can.
func (d *Dispatcher) enqueue(q *waitQueue, t *task) {
	d.stats.queued.Add(1)
	wait := min(t.pol.QueueWait, time.Until(t.deadline))
	q.mu.Lock()
	t.queued = q.tasks.PushBack(t)
	q.n.Add(1)
	t.waitTimer = time.AfterFunc(wait, func() { d.giveUp(q, t, wait) })
	q.mu.Unlock()
	if e := t.stopped.Load(); e != nil {
		d.unqueue(q, t, e) // cancelled on its way into the queue
		return
	}
	d.pump(q) // a slot may have come free since route looked
}

// take removes t from q, unless pump, giveUp or a cancel took it first; it
// reports whether it did, and the taker then owns t.
func (q *waitQueue) take(t *task) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.queued == nil {
		return false
	}
	q.remove(t)
	return true
}

// remove takes t out of the queue; q.mu is held.
func (q *waitQueue) remove(t *task) {
	q.tasks.Remove(t.queued)
	q.n.Add(-1)
	t.queued = nil
	t.waitTimer.Stop()
}

// unqueue ends t's wait with e, unless pump or giveUp took it first.
func (d *Dispatcher) unqueue(q *waitQueue, t *task, e *streams.Error) {
	if q.take(t) {
		t.done(t, nil, e)
	}
}

// pump sends waiting tasks, oldest first, while an instance has a free
// slot for them.
func (d *Dispatcher) pump(q *waitQueue) {
	for q.n.Load() > 0 {
		q.mu.Lock()
		el := q.tasks.Front()
		if el == nil {
			q.mu.Unlock()
			return
		}
		t := el.Value.(*task)
		inst, probe, why := d.route(t)
		if why == routeFull {
			q.mu.Unlock()
			return // still full: the next settle pumps again
		}
		q.remove(t)
		q.mu.Unlock()
		d.proceed(t, inst, probe, why)
	}
}

// giveUp ends t's wait for a slot, unless pump took it first.
func (d *Dispatcher) giveUp(q *waitQueue, t *task, waited time.Duration) {
	if !q.take(t) {
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
			if q := q.(*waitQueue); q.n.Load() > 0 {
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
