package integration

import (
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestMain(m *testing.M) {
	RunChildIfAsked()
	// The stacks' logs, printed when a test fails, are read for timing.
	zerolog.TimeFieldFormat = time.RFC3339Nano
	os.Exit(m.Run())
}
