package auth

import "errors"

var (
	// ErrNoStore is returned when a directory holds no identity store (run
	// `agentreach auth init`).
	ErrNoStore = errors.New("auth: no identity store")
	// ErrStoreExists is returned by Init when the directory already holds a
	// store.
	ErrStoreExists = errors.New("auth: identity store exists")
	// ErrInvalidIdentity is returned for an identity that cannot be made:
	// a bad name, role or type; the wrapped message says which.
	ErrInvalidIdentity = errors.New("auth: invalid identity")
	// ErrIdentityExists is returned when an identity's name is taken.
	ErrIdentityExists = errors.New("auth: identity exists")
	// ErrUnknownIdentity is returned for a name the store or the directory
	// does not hold.
	ErrUnknownIdentity = errors.New("auth: unknown identity")
	// ErrRevoked is returned for an identity that was revoked.
	ErrRevoked = errors.New("auth: identity revoked")
	// ErrPush is returned when the servers refuse or do not confirm an
	// account update.
	ErrPush = errors.New("auth: account update not applied")
)
