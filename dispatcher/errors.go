package dispatcher

import (
	"errors"

	"github.com/agent-reach/agentreach/dispatcher/durable"
)

var (
	// ErrNotStarted is returned by Drain before Start.
	ErrNotStarted = errors.New("dispatcher: not started")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("dispatcher: already started")
	// ErrNotReplayable is returned by Replay for a parked entry that was
	// stored without its payload (streams.HeaderDLQDropped).
	ErrNotReplayable = durable.ErrNotReplayable
)
