package agentkit

import (
	"sync"
	"testing"
	"time"
)

// Jobs that block each get a worker of their own: none waits behind another.
func TestBlockingJobsRunSideBySide(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	const n = 20
	started := make(chan struct{}, n)
	release := make(chan struct{})
	var finished sync.WaitGroup
	finished.Add(n)
	w := newWorkers(func(job) {
		started <- struct{}{}
		<-release
		finished.Done()
	}, done)
	for range n {
		w.push(job{})
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
	seen := map[*Request]int{}
	var ran sync.WaitGroup
	ran.Add(pushers * each)
	w := newWorkers(func(j job) {
		if j.req.Attempt%97 == 0 { // some jobs take a while, so more workers join
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		seen[j.req]++
		mu.Unlock()
		ran.Done()
	}, done)
	var push sync.WaitGroup
	for p := range pushers {
		push.Go(func() {
			for i := range each {
				w.push(job{req: &Request{Attempt: p*each + i}})
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
			t.Fatalf("job %d ran %d times", r.Attempt, c)
		}
	}
}

// A queue that never quite drains reuses its array: it does not grow with
// every job that passes through it.
func TestQueueThatNeverDrainsStaysSmall(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	w := newWorkers(func(job) {}, done)
	w.searching = true // a worker is on its way: push and take wake nobody
	w.push(job{})
	for i := range 10_000 {
		w.push(job{req: &Request{Attempt: i}})
		j, ok := w.take(false)
		if !ok {
			t.Fatalf("job %d: queue empty", i)
		}
		if i > 0 && j.req.Attempt != i-1 {
			t.Fatalf("took job %d, want %d: not first in, first out", j.req.Attempt, i-1)
		}
	}
	if c := cap(w.pending); c > 8 {
		t.Fatalf("array holds %d jobs for 2 waiting at most", c)
	}
}
