package a2a

import (
	"context"
	"sync"
)

// DefaultMaxTasks bounds the tasks a server remembers (Config.MaxTasks).
const DefaultMaxTasks = 10000

// entry is a task the server remembers: its latest state, its caller,
// and, while it runs in the background (returnImmediately), how to cancel
// it.
type entry struct {
	task   Task
	caller string
	cancel context.CancelFunc // nil once it ended, or for a call answered at once
	done   chan struct{}      // closed when a background task has ended; nil for a call answered at once
}

// tasks holds the latest Task of each task this server ran, at most max,
// forgetting the oldest ended one first. Safe for concurrent use.
type tasks struct {
	mu    sync.Mutex
	max   int
	byID  map[string]*entry
	order []string // ids, oldest first
}

func newTasks(max int) *tasks { return &tasks{max: max, byID: make(map[string]*entry)} }

// add remembers e; false when the store is full of running tasks.
func (s *tasks) add(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byID) >= s.max && !s.forgetOne() {
		return false
	}
	s.byID[e.task.ID] = e
	s.order = append(s.order, e.task.ID)
	return true
}

// forgetOne forgets the oldest ended task; false when every task runs.
func (s *tasks) forgetOne() bool {
	for i, id := range s.order {
		if e, ok := s.byID[id]; !ok || e.task.Status.State.Terminal() {
			delete(s.byID, id)
			if i == 0 {
				s.order = s.order[1:]
			} else {
				s.order = append(s.order[:i:i], s.order[i+1:]...)
			}
			return true
		}
	}
	return false
}

// update sets the task of id (still remembered) to t, and ends its
// cancel.
func (s *tasks) update(t Task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byID[t.ID]; ok {
		e.task = t
		if t.Status.State.Terminal() {
			e.cancel = nil
		}
	}
}

// get returns the task id of caller, with its cancel and done (nil for a
// task that has ended).
func (s *tasks) get(caller, id string) (Task, context.CancelFunc, <-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if !ok || e.caller != caller {
		return Task{}, nil, nil, false
	}
	return e.task, e.cancel, e.done, true
}

// list returns caller's tasks, newest first, that keep says to.
func (s *tasks) list(caller string, keep func(*Task) bool) []Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Task
	for i := len(s.order) - 1; i >= 0; i-- {
		e := s.byID[s.order[i]]
		if e != nil && e.caller == caller && keep(&e.task) {
			out = append(out, e.task)
		}
	}
	return out
}
