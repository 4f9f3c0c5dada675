package metrics

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig is returned by New for a Config out of range.
var ErrInvalidConfig = errors.New("metrics: invalid config")

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}
