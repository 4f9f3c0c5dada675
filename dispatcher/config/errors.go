package config

import "errors"

// ErrInvalid is returned, wrapped, by Validate (and so by dispatcher.New)
// for a configuration a replica cannot run.
var ErrInvalid = errors.New("dispatcher: invalid config")
