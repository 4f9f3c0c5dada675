package policy

import "errors"

var (
	// ErrInvalid is returned when a REACH_POLICY key or value does
	// not decode or validate; the wrapped message names the field.
	ErrInvalid = errors.New("invalid policy")
)
