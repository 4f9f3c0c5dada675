package declare

import "errors"

var (
	// ErrInvalidDeclaration is returned when a capability declaration does
	// not decode or validate; the wrapped message names every bad field by
	// its path, e.g. "capabilities[1].input_schema".
	ErrInvalidDeclaration = errors.New("invalid capability declaration")
	// ErrInvalidRequirement is returned when task requirements
	// (Reach-Require, or a policy's require) do not decode or validate; the
	// wrapped message names the field.
	ErrInvalidRequirement = errors.New("invalid requirement")
	// ErrInvalidPayload is returned when a payload does not satisfy its
	// capability's input_schema; the wrapped message names the field and
	// what is wrong in the caller's terms. A dispatcher answers BAD_REQUEST.
	ErrInvalidPayload = errors.New("invalid payload")
)
