package durable

import "errors"

// ErrNotReplayable is returned by Replay for a parked entry that was
// stored without its payload (streams.HeaderDLQDropped), or that could not
// be signed.
var ErrNotReplayable = errors.New("dispatcher: parked entry cannot be replayed")
