package signature

import "errors"

var (
	// ErrInvalidCredentials is returned for a credentials, seed or key file
	// that does not parse or does not belong to Agent-Reach; the wrapped
	// message names the file.
	ErrInvalidCredentials = errors.New("auth: invalid credentials")
	// ErrBadSignature is returned when a task's Reach-Signature does not
	// prove its Reach-Source.
	ErrBadSignature = errors.New("auth: bad signature")
)
