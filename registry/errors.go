package registry

import "errors"

var (
	// ErrInvalidRecord is returned when an agent record fails validation;
	// the wrapped message says which field.
	ErrInvalidRecord = errors.New("invalid agent record")
	// ErrNotFound is returned when no record exists for an instance id.
	ErrNotFound = errors.New("agent not found")
	// ErrNoDeclaration is returned when REACH_CAPS holds nothing for an
	// agent type.
	ErrNoDeclaration = errors.New("no capability declaration")
	// ErrNoPolicy is returned when REACH_POLICY holds nothing under a key.
	ErrNoPolicy = errors.New("no policy")
)
