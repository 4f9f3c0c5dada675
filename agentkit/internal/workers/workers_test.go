package workers

import (
	"sync"
	"testing"
	"time"
)

// item is a job of the tests: n tells it apart.
type item struct{ n int }

// Jobs that block each get a worker of their own: none waits behind another.
func TestBlockingJobsRunSideBySide(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	const n = 20
	started := make(chan struct{}, n)
	release := make(chan struct{})
	var finished sync.WaitGroup
	finished.Add(n)
	w := New(func(*item) {
		started <- struct{}{}
		<-release
		finished.Done()
	}, done)
	for range n {
		w.Push(nil)
	}
	for i := range n {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d blocking jobs started", i, n)
		}
	}
	close(release)
	finished.Wait()
}

// Every job pushed, from many goroutines at once, runs exactly once, also
// while workers come and go.
func TestEveryJobRunsOnce(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	const pushers, each = 8, 2000
	var mu sync.Mutex
	seen := map[*item]int{}
	var ran sync.WaitGroup
	ran.Add(pushers * each)
	w := New(func(j *item) {
		if j.n%97 == 0 { // some jobs take a while, so more workers join
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		seen[j]++
		mu.Unlock()
		ran.Done()
	}, done)
	var push sync.WaitGroup
	for p := range pushers {
		push.Go(func() {
			for i := range each {
				w.Push(&item{n: p*each + i})
			}
		})
	}
	push.Wait()
	ran.Wait()
	if len(seen) != pushers*each {
		t.Fatalf("%d distinct jobs ran, want %d", len(seen), pushers*each)
	}
	for r, c := range seen {
		if c != 1 {
			t.Fatalf("job %d ran %d times", r.n, c)
		}
	}
}

// A queue that never quite drains reuses its array: it does not grow with
// every job that passes through it.
func TestQueueThatNeverDrainsStaysSmall(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	w := New(func(*item) {}, done)
	w.searching = true // a worker is on its way: push and take wake nobody
	w.Push(&item{})
	for i := range 10_000 {
		w.Push(&item{n: i})
		j, ok := w.take(false)
		if !ok {
			t.Fatalf("job %d: queue empty", i)
		}
		if i > 0 && j.n != i-1 {
			t.Fatalf("took job %d, want %d: not first in, first out", j.n, i-1)
		}
	}
	if c := cap(w.pending); c > 8 {
		t.Fatalf("array holds %d jobs for 2 waiting at most", c)
	}
}
