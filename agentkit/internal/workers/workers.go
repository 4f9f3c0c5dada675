// Package workers runs an agent's tasks on reusable goroutines.
package workers

import (
	"sync"
	"time"
)

// workerIdle is how long a worker waits for its next task before it ends.
const workerIdle = 10 * time.Second

// Pool runs jobs of type J on reusable goroutines. Reusing them spares every task a
// fresh goroutine and the growing of its stack (measured: ~15% of an echo
// agent's CPU).
//
// A worker that finishes a job takes the next queued one itself instead of
// parking, and a push wakes a parked worker only when none is already on
// its way to the queue. So a burst of short tasks runs back to back on one
// goroutine, whose replies leave in one write, rather than each waking its
// own worker and each reply flushing alone (measured: about four times the
// write system calls and 2.5 times the agent's CPU per echo task). A worker
// that takes a job while others wait wakes another first, so a job that
// blocks never holds up the ones behind it.
type Pool[J any] struct {
	run  func(J)
	done <-chan struct{} // parked workers end when it closes

	mu      sync.Mutex
	pending []J // FIFO from head; at most MaxConcurrent waiting, as each holds a slot
	head    int
	// searching: a worker has been woken or started and has not taken a
	// job yet. Every job in pending has such a worker, or a worker that is
	// between jobs, coming for it.
	searching bool
	wake      chan struct{} // unbuffered: to a parked worker
}

// New returns a pool that runs each job with run; its parked workers end
// when done closes (a worker busy with a job ends after it).
func New[J any](run func(J), done <-chan struct{}) *Pool[J] {
	return &Pool[J]{run: run, done: done, wake: make(chan struct{})}
}

// Push queues j and makes sure a worker comes for it.
func (w *Pool[J]) Push(j J) {
	w.mu.Lock()
	if len(w.pending) == cap(w.pending) && w.head > 0 {
		// Full, with taken jobs in front: move the waiting ones to the
		// start instead of growing the array, which a queue that never
		// quite drains would otherwise do without end.
		n := copy(w.pending, w.pending[w.head:])
		clear(w.pending[n:])
		w.pending, w.head = w.pending[:n], 0
	}
	w.pending = append(w.pending, j)
	wake := !w.searching
	w.searching = true
	w.mu.Unlock()
	if wake {
		w.wakeOne()
	}
}

// wakeOne hands the search to a parked worker, or starts one.
func (w *Pool[J]) wakeOne() {
	select {
	case w.wake <- struct{}{}:
	default:
		go w.work()
	}
}

// take returns the next job, if any; woken says the caller is the searching
// worker. While more jobs wait and nobody searches, it wakes another worker.
func (w *Pool[J]) take(woken bool) (J, bool) {
	var none J
	w.mu.Lock()
	if woken {
		w.searching = false
	}
	if w.head == len(w.pending) {
		w.mu.Unlock()
		return none, false
	}
	j := w.pending[w.head]
	w.pending[w.head] = none
	w.head++
	if w.head == len(w.pending) { // drained: reuse the array from its start
		w.pending, w.head = w.pending[:0], 0
	}
	wake := w.head < len(w.pending) && !w.searching
	if wake {
		w.searching = true
	}
	w.mu.Unlock()
	if wake {
		w.wakeOne()
	}
	return j, true
}

// work runs queued jobs until there are none, then parks until woken again,
// for at most workerIdle, or until done closes.
func (w *Pool[J]) work() {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		for woken := true; ; woken = false {
			j, ok := w.take(woken)
			if !ok {
				break
			}
			w.run(j)
		}
		idle.Reset(workerIdle)
		select {
		case <-w.wake:
		case <-idle.C:
			return
		case <-w.done:
			return
		}
	}
}
