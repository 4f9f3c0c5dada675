package registry

import "errors"

var (
	// ErrInvalidPolicy is returned when a REACH_POLICY key or value does
	// not decode or validate; the wrapped message names the field.
	ErrInvalidPolicy = errors.New("invalid policy")
)
