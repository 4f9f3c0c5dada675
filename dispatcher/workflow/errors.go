package workflow

import "errors"

var (
	// ErrInvalidConfig is returned by New for a configuration it cannot run.
	ErrInvalidConfig = errors.New("workflow: invalid config")
	// ErrNoRun is returned by GetRun for a run id REACH_RUNS does not hold.
	ErrNoRun = errors.New("workflow: no such run")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("workflow: engine already started")
	// errLostRun ends a durable run on a replica whose write of the run's
	// record failed its revision check: another replica took the run over.
	errLostRun = errors.New("workflow: the run was taken over by another replica")
)
