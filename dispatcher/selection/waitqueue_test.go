package selection

import (
	"sync"
	"testing"
	"time"
)

type waiter struct {
	id   int
	wait Waiting[*waiter]
}

// Entries leave oldest first, only when the offer accepts them, and a
// taken entry is taken once.
func TestWaitQueueOrderAndTake(t *testing.T) {
	var q WaitQueue[*waiter]
	ws := []*waiter{{id: 1}, {id: 2}, {id: 3}}
	for _, w := range ws {
		q.Push(&w.wait, w, time.Hour, func() {})
	}
	if q.Len() != 3 {
		t.Fatalf("Len %d, want 3", q.Len())
	}
	if _, ok := q.Next(func(*waiter) bool { return false }); ok || q.Len() != 3 {
		t.Fatalf("a declined offer took an entry (Len %d)", q.Len())
	}
	if !q.Take(&ws[1].wait) || q.Take(&ws[1].wait) {
		t.Fatal("Take of a waiting entry must succeed once")
	}
	var seen []int
	q.Range(func(w *waiter) { seen = append(seen, w.id) })
	if len(seen) != 2 || seen[0] != 1 || seen[1] != 3 {
		t.Fatalf("Range %v, want [1 3]", seen)
	}
	for _, want := range []int{1, 3} {
		w, ok := q.Next(func(*waiter) bool { return true })
		if !ok || w.id != want {
			t.Fatalf("Next = %v %v, want %d", w, ok, want)
		}
	}
	if _, ok := q.Next(func(*waiter) bool { return true }); ok || q.Len() != 0 {
		t.Fatal("Next of an empty queue handed something out")
	}
	if q.Take(&ws[0].wait) {
		t.Fatal("Take of an entry Next handed out succeeded")
	}
}

// An entry whose wait runs out is owned by exactly one of its expire
// function and a concurrent Next.
func TestWaitQueueExpireRacesNext(t *testing.T) {
	for range 200 {
		var q WaitQueue[*waiter]
		w := &waiter{id: 1}
		var owners sync.WaitGroup
		owners.Add(1)
		taken := make(chan string, 2)
		q.Push(&w.wait, w, time.Microsecond, func() {
			defer owners.Done()
			if q.Take(&w.wait) {
				taken <- "expire"
			}
		})
		if _, ok := q.Next(func(*waiter) bool { return true }); ok {
			taken <- "next"
		}
		// The timer may have been stopped by Next before it fired: then
		// expire never runs.
		select {
		case who := <-taken:
			if who == "expire" {
				owners.Wait()
			}
		case <-time.After(10 * time.Second):
			t.Fatal("nobody took the entry")
		}
		if len(taken) != 0 || q.Len() != 0 {
			t.Fatalf("the entry was taken twice or stayed (Len %d)", q.Len())
		}
	}
}
