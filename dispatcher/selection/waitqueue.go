package selection

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"
)

// WaitQueue holds, in arrival order, what waits for a free slot. An entry
// leaves it exactly once: handed out oldest first (Next), when its wait
// runs out (the expire function Push was given, which must Take it to own
// it), or taken out by someone else (Take, a cancel). The zero value is an
// empty queue; its methods are safe for concurrent use.
type WaitQueue[T any] struct {
	mu    sync.Mutex
	items list.List    // of *Waiting[T]
	n     atomic.Int64 // items.Len(), readable without mu
}

// Waiting is one entry's place in a WaitQueue; its zero value is in none.
// It is meant to be a field of what waits, so whoever holds that can take
// it out.
type Waiting[T any] struct {
	value T
	el    *list.Element // nil once out of the queue
	timer *time.Timer   // ends the wait
}

// Len is how many entries wait, read without the queue's lock.
func (q *WaitQueue[T]) Len() int64 { return q.n.Load() }

// Push puts v at the back of q in w's place; after wait, expire runs
// unless w has left the queue by then (expire must still Take w, which a
// concurrent Next or Take may win).
func (q *WaitQueue[T]) Push(w *Waiting[T], v T, wait time.Duration, expire func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.value = v
	w.el = q.items.PushBack(w)
	q.n.Add(1)
	w.timer = time.AfterFunc(wait, expire)
}

// Take removes w, unless Next or another Take removed it first; it reports
// whether it did, and the taker then owns w's value.
func (q *WaitQueue[T]) Take(w *Waiting[T]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.el == nil {
		return false
	}
	q.remove(w)
	return true
}

// Next hands out the oldest entry when offer, called with its value under
// q's lock, accepts it; it reports false when q is empty or offer declined
// (the entry stays first).
func (q *WaitQueue[T]) Next(offer func(v T) bool) (v T, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	el := q.items.Front()
	if el == nil {
		return v, false
	}
	w := el.Value.(*Waiting[T])
	if !offer(w.value) {
		return v, false
	}
	q.remove(w)
	return w.value, true
}

// Range calls f with every waiting value, oldest first, under q's lock.
func (q *WaitQueue[T]) Range(f func(v T)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for el := q.items.Front(); el != nil; el = el.Next() {
		f(el.Value.(*Waiting[T]).value)
	}
}

// remove takes w out of the queue and stops its timer; q.mu is held.
func (q *WaitQueue[T]) remove(w *Waiting[T]) {
	q.items.Remove(w.el)
	q.n.Add(-1)
	w.el = nil
	w.timer.Stop()
}
