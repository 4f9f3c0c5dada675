package integration

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// TestMain serves as a child process when a fault test re-executed this
// binary as one, and otherwise runs the tests and fails the package when one
// leaves a goroutine running.
func TestMain(m *testing.M) {
	RunChildIfAsked()
	// The stacks' logs, printed when a test fails, are read for timing.
	zerolog.TimeFieldFormat = time.RFC3339Nano
	goleak.VerifyTestMain(m)
}
