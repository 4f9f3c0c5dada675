package registry

import "errors"

var (
	// ErrInvalidRecord is returned when an agent record fails validation;
	// the wrapped message says which field.
	ErrInvalidRecord = errors.New("invalid agent record")
	// ErrNotFound is returned when no record exists for an instance id.
	ErrNotFound = errors.New("agent not found")
	// ErrInvalidDeclaration is returned when a capability declaration does
	// not decode or validate; the wrapped message names every bad field by
	// its path, e.g. "capabilities[1].input_schema".
	ErrInvalidDeclaration = errors.New("invalid capability declaration")
	// ErrNoDeclaration is returned when REACH_CAPS holds nothing for an
	// agent type.
	ErrNoDeclaration = errors.New("no capability declaration")
	// ErrInvalidRequirement is returned when task requirements
	// (Reach-Require, or a policy's require) do not decode or validate; the
	// wrapped message names the field.
	ErrInvalidRequirement = errors.New("invalid requirement")
	// ErrInvalidPayload is returned when a payload does not satisfy its
	// capability's input_schema; the wrapped message names the field and
	// what is wrong in the caller's terms. A dispatcher answers BAD_REQUEST.
	ErrInvalidPayload = errors.New("invalid payload")
	// ErrInvalidPolicy is returned when a REACH_POLICY key or value does
	// not decode or validate; the wrapped message names the field.
	ErrInvalidPolicy = errors.New("invalid policy")
	// ErrNoPolicy is returned when REACH_POLICY holds nothing under a key.
	ErrNoPolicy = errors.New("no policy")
)
