package registry

import "errors"

var (
	// ErrInvalidRecord is returned when an agent record or capability
	// declaration fails validation; the wrapped message says which field.
	ErrInvalidRecord = errors.New("invalid agent record")
	// ErrNotFound is returned when no record exists for an instance id.
	ErrNotFound = errors.New("agent not found")
)
