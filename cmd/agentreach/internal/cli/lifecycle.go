package cli

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// StopTimeout bounds how long a long-running command takes to stop after
// Ctrl-C or SIGTERM: agents finish their tasks, dispatchers their in-flight
// ones. It stays below the usual 30 s stop grace period of orchestrators.
const StopTimeout = 25 * time.Second

// Stopper stops what a command started, last started first, exactly once.
// It is used from one goroutine.
type Stopper struct {
	steps   []stopStep
	stopped bool
	err     error
}

type stopStep struct {
	what string
	fn   func(context.Context) error
}

// Add registers how to stop something that has just started.
func (s *Stopper) Add(what string, fn func(context.Context) error) {
	s.steps = append(s.steps, stopStep{what, fn})
}

// Stop runs every step, newest first, within timeout in total, and returns
// their errors joined. Calling it again returns the first result.
func (s *Stopper) Stop(timeout time.Duration) error {
	if s.stopped {
		return s.err
	}
	s.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errs []error
	for i := len(s.steps) - 1; i >= 0; i-- {
		if err := s.steps[i].fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", s.steps[i].what, err))
		}
	}
	s.err = errors.Join(errs...)
	return s.err
}
